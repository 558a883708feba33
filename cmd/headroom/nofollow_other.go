//go:build !unix

package main

// noFollow is 0 where open has no such flag (Windows: a symlink there
// needs privileges to create).
const noFollow = 0
