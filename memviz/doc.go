// Package memviz reads and writes memory snapshots and shows them in the
// browser.
//
// One model (Snapshot) holds a snapshot from any of the files it reads:
//
//   - headroom's JSON (device.Snapshot, docs/snapshot-schema.md), written by
//     headroom train --memory-snapshot FILE.json;
//   - headroom's pickle (Pickle), the same snapshot in the layout of
//     PyTorch's torch.cuda.memory._dump_snapshot, which PyTorch's memory_viz
//     page (https://pytorch.org/memory_viz) opens;
//   - PyTorch's pickles: _dump_snapshot's dict of PyTorch 2.x (segments with
//     blocks and frames, device_traces with alloc, free_requested,
//     free_completed, segment_alloc, segment_free, segment_map,
//     segment_unmap, oom and snapshot entries), PyTorch 2.0's blocks with a
//     history instead of frames, and the list of segments of
//     torch.cuda.memory_snapshot() (PyTorch 1.13).
//
// Pickles are read with memviz/internal/pickle and nothing allowed but plain
// values, so a pickle that names any class is refused before anything in it
// is used. Every reading error is a *FormatError that names the file and,
// for content of the wrong type, the place in the snapshot
// ("segments[3].blocks[0].size: want int, got str"). The reader is fuzzed
// (FuzzImport).
//
// Analyze follows one device's history: every allocation's lifetime, the
// active bytes after every event stacked by category (headroom's files) or
// by allocation (PyTorch's), the peak, the largest allocations at the peak,
// and the allocator's segments and blocks after any event (undoing later
// segment events from the final state, as memory_viz does).
//
// The summary says what went wrong first: the out-of-memory events (the
// request, the device's free bytes, the active bytes then), and the
// history's length as the file has it, with the free_requested and
// free_completed pairs shown as one free counted (Snapshot.Merged). The
// page zooms (a brush on a minimap; /api/timeline gives every event of a
// zoomed range of a long history), sets how many allocations get bands
// (the detail control), lists the events (click or arrow keys) and shows
// the selected event's or band's stack in a side pane; its view can be
// given in the URL's hash (#event=N&detail=K&zoom=A-B&band=KEY).
// Summary.WriteSVG draws the same timeline as a static SVG (headroom viz
// --svg). The x-axis is time when every event of the history has a time,
// in order (events otherwise, said as such; #axis=event asks for events).
// The cached-segment timeline (Summary.Reserved) stacks the reserved
// memory by segment over the same points. The peak of each training step
// (Summary.Steps) comes from the step_begin and step_end entries the
// trainer writes into the history (device.Allocator.MarkStep): the page
// draws a bar per step and says first when the peaks rise step after
// step (a leak).
//
// Compare sets two snapshots side by side (a plan against a run, or two
// runs): the timelines overlaid and what is live at each peak by category
// and by tensor (headroom viz --compare A B, served by CompareServer).
// Live is a training run shown while it runs (headroom train --live): its
// steps stream to the page as server-sent events and the snapshot is
// taken again as they complete (NewLiveServer).
//
// Server serves that as a page embedded in the binary (HTML, CSS and a small
// script drawing SVG; nothing is loaded from elsewhere) and JSON endpoints;
// headroom viz FILE runs it on localhost. The page is tested in headless
// Chromium (browser_test.go); without Chromium those tests fail, saying how
// to install it, unless HEADROOM_SKIP_BROWSER=1 is set.
//
// scripts/reference/snapshot_ref.py writes the PyTorch files in testdata
// (with the facts the tests check) and checks, with Python, that headroom's
// exported pickles (testdata/headroom_export*.pickle) are what memory_viz
// reads.
package memviz
