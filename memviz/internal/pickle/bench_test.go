package pickle

import (
	"os"
	"testing"
)

func BenchmarkUnmarshalSnapshot(b *testing.B) {
	data, err := os.ReadFile("testdata/snapshot_p4.pickle")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Unmarshal(data, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMarshalSnapshot(b *testing.B) {
	data, err := os.ReadFile("testdata/snapshot_p4.pickle")
	if err != nil {
		b.Fatal(err)
	}
	v, err := Unmarshal(data, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Marshal(v, 4); err != nil {
			b.Fatal(err)
		}
	}
}
