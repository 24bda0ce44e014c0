// Package app uses lib.
package app

import "example.com/mod/lib"

// Use uses lib's API.
func Use() int {
	return lib.UsedByCode + lib.UsedByCodeAndTests + int(lib.Classify()) + int(lib.Run().Field)
}

// shadowed reads a field of a parameter named lib, not the package.
func shadowed(lib struct{ ShadowedInCode int }) int { return lib.ShadowedInCode }
