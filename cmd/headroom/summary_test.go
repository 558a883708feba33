package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestSummaryCommand(t *testing.T) {
	var out, log bytes.Buffer
	if err := summaryMain(context.Background(), []string{"--model", "gpt-shakespeare-char", "--batch-size", "2", "--depth", "2"}, &out, &log); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"transformer.wte", "[2, 256, 384]", "lm_head", "[2, 256, 65]", "parameters: 10,745,088", "deeper modules not shown", "total peak"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", "resnt18"}, "--model"},
		{[]string{"--batch-size", "0"}, "--batch-size 0: must be at least 1"},
		{[]string{"--depth", "-1"}, "--depth -1"},
		{[]string{"--optimizer", "lion"}, "--optimizer"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		if err := summaryMain(context.Background(), tt.args, &out, &log); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: got %v, want %q", tt.args, err, tt.want)
		}
	}
}
