//go:build !linux

package cputime

func threads() []Thread { return nil }
