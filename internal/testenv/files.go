package testenv

import (
	"os"
	"testing"
)

// ReadFile returns the contents of the file at path (a fixture, a file a
// run wrote), failing t with the path when it cannot be read.
func ReadFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return b
}

// WriteFile writes data to the file at path with permissions perm, failing t
// with the path when it cannot, and returns path.
func WriteFile(t testing.TB, path string, data []byte, perm os.FileMode) string {
	t.Helper()
	if err := os.WriteFile(path, data, perm); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	return path
}
