#!/bin/sh
# ESRGAN's PSNR-oriented pre-training of a small RRDBNet on the wallpaper
# photos, and its quality against bicubic upsampling on the held-out ones
# (docs/esrgan.md, "Quality"). Long: run it alone, niced.
#
#   scripts/esrgan/quality.sh [WORK]        (default /tmp/esrgan-quality)
#
# Writes into WORK: pixel.jsonl (the --log), train*.out, rrdb.safetensors
# (the trained generator, 0.6 MB), the held-out photos' LR inputs and 4×
# outputs, the report's SVG charts, side-by-side crops, each leg's PSNR on
# the held-out photos (legs-psnr.out) and the colour checks (color-*.out).
set -eu
work=${1:-/tmp/esrgan-quality}
photos=/tmp/esrgan-photos
here=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$work"
"$here/scripts/esrgan/photos.sh" "$photos"
cd "$here"
go build -o "$work/headroom" ./cmd/headroom
go build -o "$work/srtool" ./scripts/esrgan/srtool
cd "$work"

# 1. L1 pre-training, one run in eight legs: 5e-4 constant for at most 45
# minutes of cpu or 55 of wall clock, then, from where it stopped (the
# last step is read from train.out), BasicSR's 2e-4 annealed on a cosine
# down to 0 over 500 steps; then 2e-4 again on a cosine over 66 minutes of
# wall clock (the steps they allow on a shared machine are not known in
# advance), with BasicSR's weight average (ema_decay 0.999), which is what
# leg 3 validates and saves.
/usr/bin/time -v nice -n 10 ./headroom gan --pixel-only \
	--data "$photos/train" --val "$photos/test" \
	--nf 16 --nb 3 --gc 8 --batch 16 --crop 64 --lr 5e-4 \
	--steps 100000 --time 45m --wall 55m --val-every 100 --threads 1 --seed 1 \
	--log pixel.jsonl --save rrdb-leg1.safetensors >train.out 2>&1
last=$(sed -n 's/^trained \([0-9]*\) steps.*/\1/p' train.out)
/usr/bin/time -v nice -n 10 ./headroom gan --pixel-only \
	--data "$photos/train" --val "$photos/test" \
	--nf 16 --nb 3 --gc 8 --batch 16 --crop 64 --lr 2e-4 --cosine \
	--init rrdb-leg1.safetensors --from-step "$last" \
	--steps 500 --wall 10m --val-every 100 --threads 1 --seed 2 \
	--log pixel.jsonl --save rrdb-leg2.safetensors >train2.out 2>&1
last=$((last + $(sed -n 's/^trained \([0-9]*\) steps.*/\1/p' train2.out)))
/usr/bin/time -v nice -n 5 ./headroom gan --pixel-only \
	--data "$photos/train" --val "$photos/test" \
	--nf 16 --nb 3 --gc 8 --batch 16 --crop 64 --lr 2e-4 --cosine --ema 0.999 \
	--init rrdb-leg2.safetensors --from-step "$last" \
	--steps 100000 --wall 66m --val-every 250 --threads 1 --seed 3 \
	--log pixel.jsonl --save rrdb-leg3.safetensors >train3.out 2>&1
last=$((last + $(sed -n 's/^trained \([0-9]*\) steps.*/\1/p' train3.out)))
# 4. 1e-4 on a cosine over 33 more minutes of wall clock, the average kept.
/usr/bin/time -v nice -n 5 ./headroom gan --pixel-only \
	--data "$photos/train" --val "$photos/test" \
	--nf 16 --nb 3 --gc 8 --batch 16 --crop 64 --lr 1e-4 --cosine --ema 0.999 \
	--init rrdb-leg3.safetensors --from-step "$last" \
	--steps 100000 --wall 33m --val-every 250 --threads 1 --seed 4 \
	--log pixel.jsonl --save rrdb-leg4.safetensors >train4.out 2>&1
last=$((last + $(sed -n 's/^trained \([0-9]*\) steps.*/\1/p' train4.out)))
# 5, 6, 7. The colour shift on a deep blue sky (docs/esrgan.md): with half
# the crops' colour channels shuffled (--rgb-permute 0.5, CutBlur's RGB
# permutation), 1e-4 on a cosine over 6 minutes of cpu (15 of wall at
# most), then again over 30 (55 of wall at most), the average kept.
/usr/bin/time -v nice -n 10 ./headroom gan --pixel-only \
	--data "$photos/train" --val "$photos/test" \
	--nf 16 --nb 3 --gc 8 --batch 16 --crop 64 --lr 1e-4 --cosine --ema 0.999 --rgb-permute 0.5 \
	--init rrdb-leg4.safetensors --from-step "$last" \
	--steps 100000 --time 6m --wall 15m --val-every 250 --threads 1 --seed 5 \
	--log pixel.jsonl --save rrdb-leg5.safetensors >train5.out 2>&1
last=$((last + $(sed -n 's/^trained \([0-9]*\) steps.*/\1/p' train5.out)))
/usr/bin/time -v nice -n 10 ./headroom gan --pixel-only \
	--data "$photos/train" --val "$photos/test" \
	--nf 16 --nb 3 --gc 8 --batch 16 --crop 64 --lr 1e-4 --cosine --ema 0.999 --rgb-permute 0.5 \
	--init rrdb-leg5.safetensors --from-step "$last" \
	--steps 100000 --time 30m --wall 55m --val-every 250 --threads 1 --seed 6 \
	--log pixel.jsonl --save rrdb-leg6.safetensors >train6.out 2>&1
last=$((last + $(sed -n 's/^trained \([0-9]*\) steps.*/\1/p' train6.out)))
# 7. 5e-5 on a cosine over 5 more minutes of cpu (12 of wall at most).
/usr/bin/time -v nice -n 10 ./headroom gan --pixel-only \
	--data "$photos/train" --val "$photos/test" \
	--nf 16 --nb 3 --gc 8 --batch 16 --crop 64 --lr 5e-5 --cosine --ema 0.999 --rgb-permute 0.5 \
	--init rrdb-leg6.safetensors --from-step "$last" \
	--steps 100000 --time 5m --wall 12m --val-every 250 --threads 1 --seed 7 \
	--log pixel.jsonl --save rrdb-leg7.safetensors >train7.out 2>&1
last=$((last + $(sed -n 's/^trained \([0-9]*\) steps.*/\1/p' train7.out)))
# 8. The same again over 8 more minutes of cpu (20 of wall at most): the
# validation was still rising when leg 7's annealing ended.
/usr/bin/time -v nice -n 10 ./headroom gan --pixel-only \
	--data "$photos/train" --val "$photos/test" \
	--nf 16 --nb 3 --gc 8 --batch 16 --crop 64 --lr 5e-5 --cosine --ema 0.999 --rgb-permute 0.5 \
	--init rrdb-leg7.safetensors --from-step "$last" \
	--steps 100000 --time 8m --wall 20m --val-every 250 --threads 1 --seed 8 \
	--log pixel.jsonl --save rrdb.safetensors >train8.out 2>&1
./headroom report --svg charts --out report.html pixel.jsonl

# 2. Whole held-out photos: 640×400 inputs, 2560×1600 outputs.
for p in EveningGlow Kite; do
	./srtool lr "$photos/test/photos/$p.jpg" "$p-lr.png"
	# untiled (754 MiB planned: it fits 1 GiB) ...
	nice -n 10 ./headroom upscale --threads 1 --weights rrdb.safetensors --budget 1GiB \
		--float "$p-untiled.safetensors" "$p-lr.png" "$p-sr.png" | tee "$p-untiled.out"
	./srtool psnr "$photos/test/photos/$p.jpg" "$p-lr.png" "$p-sr.png" | tee "$p-psnr.out"
done
# ... and tiled, at a budget the untiled pass does not fit.
nice -n 10 ./headroom upscale --threads 1 --weights rrdb.safetensors --budget 512MiB \
	--float EveningGlow-tiled.safetensors EveningGlow-lr.png EveningGlow-tiled.png | tee EveningGlow-tiled.out
./srtool diff EveningGlow-untiled.safetensors EveningGlow-tiled.safetensors | tee EveningGlow-diff.out
# The plans of this generator at smaller budgets, and of ESRGAN's
# full-size one at that input size (exact overlap; Real-ESRGAN's 10 px).
for b in 384MiB 256MiB; do
	./headroom upscale --plan --weights rrdb.safetensors --budget $b EveningGlow-lr.png
done | tee plans.out
for o in "" "--overlap 10"; do
	./headroom upscale --plan --nf 64 --nb 23 --gc 32 --budget 1GiB $o EveningGlow-lr.png 2>&1 || true
done | tee -a plans.out

# The earlier legs' generators on the held-out photos too (docs' table).
for leg in 2 3 4 5 6 7; do
	for p in EveningGlow Kite; do
		nice -n 10 ./headroom upscale --threads 1 --weights rrdb-leg$leg.safetensors --budget 1GiB \
			"$p-lr.png" "$p-sr-leg$leg.png" >/dev/null
		./srtool psnr "$photos/test/photos/$p.jpg" "$p-lr.png" "$p-sr-leg$leg.png"
	done
done | tee legs-psnr.out

# 3. Side-by-side crops: LR input (nearest), bicubic, headroom, photo.
./srtool crop "$photos/test/photos/EveningGlow.jpg" EveningGlow-lr.png EveningGlow-sr.png 880 880 160 crop-eveningglow.png
./srtool crop "$photos/test/photos/Kite.jpg" Kite-lr.png Kite-sr.png 1640 480 160 crop-kite.png

# 4. Where a colour shift comes from (docs/esrgan.md): the data against
# PIL's and PyTorch's, and the generators on flat colours. Needs
# /usr/bin/python3 with torch and PIL; skipped without them.
if /usr/bin/python3 -c 'import torch, PIL' 2>/dev/null; then
	for w in rrdb-leg4 rrdb-leg7 rrdb; do
		/usr/bin/python3 "$here/scripts/esrgan/color_check.py" ./srtool "$photos" $w.safetensors colorcheck >color-$w.out
	done
fi
