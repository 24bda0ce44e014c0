package kestra

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// EnvWorkingDir is the env var in which Kestra's Docker and Process runners
// name the task's working directory.
const EnvWorkingDir = "WORKING_DIR"

// Dir is the task's working directory (EnvWorkingDir), where Kestra's
// outputFiles globs look for files.
type Dir struct {
	// Path is an absolute or relative directory path; "" means ".".
	Path string
}

// File is an output file being written. It becomes visible under its final
// name only on Commit; Abort (or a crash) leaves no file of that name.
type File struct {
	*os.File
	final string
	done  bool
}

// Create starts writing the output file name (a plain file name, no
// directories) in d. It fails when the name is taken by a directory, which
// Commit could not replace.
func (d Dir) Create(name string) (*File, error) {
	if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return nil, fmt.Errorf("kestra: output file name %q must be a plain file name", name)
	}
	dir := d.Path
	if dir == "" {
		dir = "."
	}
	final := filepath.Join(dir, name)
	// Commit renames onto the name, which fails where a directory has it:
	// say so now, before the task changes anything.
	if fi, err := os.Lstat(final); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("kestra: output file %s: %s is a directory; remove it or use another working directory", name, final)
	}
	f, err := os.CreateTemp(dir, "."+name+".*.tmp")
	if err != nil {
		return nil, fmt.Errorf("kestra: create output file %s in %s: %w", name, dir, err)
	}
	// CreateTemp makes the file 0600; an output file is an ordinary file.
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("kestra: create output file %s in %s: %w", name, dir, err)
	}
	return &File{File: f, final: final}, nil
}

// Commit syncs, closes and renames the file to its final name.
func (f *File) Commit() error {
	if f.done {
		return fmt.Errorf("kestra: output file %s already finished", f.final)
	}
	f.done = true
	if err := f.File.Sync(); err != nil {
		f.File.Close()
		os.Remove(f.File.Name())
		return fmt.Errorf("kestra: sync %s: %w", f.final, err)
	}
	if err := f.File.Close(); err != nil {
		os.Remove(f.File.Name())
		return fmt.Errorf("kestra: close %s: %w", f.final, err)
	}
	if err := os.Rename(f.File.Name(), f.final); err != nil {
		os.Remove(f.File.Name())
		return fmt.Errorf("kestra: rename output file to %s: %w", f.final, err)
	}
	return nil
}

// Abort discards the file. It is a no-op after Commit, so it can be deferred.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.File.Close()
	os.Remove(f.File.Name())
}
