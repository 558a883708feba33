package dataset

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// CSVOptions says how to read a table.
type CSVOptions struct {
	// Comma separates fields: ',' (the default when zero) or '\t' for TSV.
	Comma rune
	// Header says the first line names the columns.
	Header bool
	// Label names the label column (needs Header). When empty, LabelIndex
	// (0-based; negative counts from the end, so -1 is the last column)
	// picks it.
	Label      string
	LabelIndex int
	// ClassNames reads labels as class names, numbered in sorted order
	// (as ImageFolder numbers its folders); otherwise a label must be an
	// integer.
	ClassNames bool
	// SkipBad drops rows with a bad cell, counting them in Table.Skipped,
	// instead of failing.
	SkipBad bool
}

// Table is a map-style source over a CSV or TSV file held in memory: each
// row's numeric feature columns as float32 [F], and its label.
type Table struct {
	File     string
	Columns  []string // feature column names (from the header, else "c<i>")
	Classes  []string // class names when read with ClassNames
	Features []float32
	Labels   []int64
	Skipped  int // rows dropped under SkipBad
	nf       int
}

// ReadCSV reads a table from path.
func ReadCSV(path string, opt CSVOptions) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	return ParseCSV(f, path, opt)
}

// ParseCSV reads a table from r; name is used in errors (a *SampleError
// naming the row and column of a bad cell).
func ParseCSV(r io.Reader, name string, opt CSVOptions) (*Table, error) {
	cr := csv.NewReader(r)
	cr.Comma = opt.Comma
	if cr.Comma == 0 {
		cr.Comma = ','
	}
	cr.ReuseRecord = true
	if cr.Comma == '\t' {
		// TSV files rarely quote and often carry stray quotes in text.
		cr.LazyQuotes = true
	}
	t := &Table{File: name}
	label := -1
	row := 0
	var rawLabels []string
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		row++
		if err != nil {
			se := sampleErr(name, err)
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				se.Row, se.Column, se.Err = pe.Line, pe.Column, pe.Err
			} else {
				se.Row = row
			}
			if opt.SkipBad && pe != nil {
				t.Skipped++
				continue
			}
			return nil, se
		}
		if label < 0 {
			// The first record fixes the width and the label column.
			if label, err = labelColumn(rec, name, opt); err != nil {
				return nil, err
			}
			t.nf = len(rec) - 1
			for j, c := range rec {
				if j == label {
					continue
				}
				if opt.Header {
					t.Columns = append(t.Columns, c)
				} else {
					t.Columns = append(t.Columns, "c"+strconv.Itoa(j))
				}
			}
			if opt.Header {
				continue
			}
		}
		n := len(t.Features)
		var bad *SampleError
		for j, c := range rec {
			if j == label {
				continue
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(c), 32)
			if err != nil {
				bad = &SampleError{File: name, Row: row, Column: j + 1, Offset: -1, Index: -1,
					Err: fmt.Errorf("%w: %q", ErrNotNumber, c)}
				break
			}
			t.Features = append(t.Features, float32(v))
		}
		var lab int64
		if bad == nil {
			c := strings.TrimSpace(rec[label])
			if opt.ClassNames {
				rawLabels = append(rawLabels, c)
			} else if lab, err = strconv.ParseInt(c, 10, 64); err != nil || lab < 0 {
				bad = &SampleError{File: name, Row: row, Column: label + 1, Offset: -1, Index: -1,
					Err: fmt.Errorf("%w: %q is not a class number", ErrLabel, c)}
			}
		}
		if bad != nil {
			if !opt.SkipBad {
				return nil, bad
			}
			t.Features = t.Features[:n]
			t.Skipped++
			continue
		}
		t.Labels = append(t.Labels, lab)
	}
	if label < 0 {
		return nil, fmt.Errorf("dataset: %s: empty table", name)
	}
	if opt.ClassNames {
		t.Classes = slices.Clone(rawLabels)
		slices.Sort(t.Classes)
		t.Classes = slices.Compact(t.Classes)
		for i, c := range rawLabels {
			k, _ := slices.BinarySearch(t.Classes, c)
			t.Labels[i] = int64(k)
		}
	}
	return t, nil
}

// labelColumn resolves the label column against the first record.
func labelColumn(rec []string, name string, opt CSVOptions) (int, error) {
	if len(rec) < 2 {
		return 0, fmt.Errorf("dataset: %s: %d column(s); a table needs features and a label", name, len(rec))
	}
	if opt.Label != "" {
		if !opt.Header {
			return 0, fmt.Errorf("dataset: %s: label column %q named but the table has no header", name, opt.Label)
		}
		for j, c := range rec {
			if strings.TrimSpace(c) == opt.Label {
				return j, nil
			}
		}
		return 0, fmt.Errorf("dataset: %s: no column %q in header %q", name, opt.Label, rec)
	}
	j := opt.LabelIndex
	if j < 0 {
		j += len(rec)
	}
	if j < 0 || j >= len(rec) {
		return 0, fmt.Errorf("dataset: %s: label column %d outside the %d columns", name, opt.LabelIndex, len(rec))
	}
	return j, nil
}

// Len is the number of rows read.
func (t *Table) Len() int { return len(t.Labels) }

// NumFeatures is the number of feature columns.
func (t *Table) NumFeatures() int { return t.nf }

// Get copies row i.
func (t *Table) Get(i int, ex *Example) error {
	copy(ex.growX(t.nf), t.Features[i*t.nf:(i+1)*t.nf])
	ex.setShape(t.nf)
	ex.Y = append(ex.Y[:0], t.Labels[i])
	ex.Tokens = ex.Tokens[:0]
	return nil
}
