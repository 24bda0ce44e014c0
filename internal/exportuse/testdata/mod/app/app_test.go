package app

import (
	"errors"
	"testing"

	"example.com/mod/lib"
)

func TestApp(t *testing.T) {
	_ = lib.UsedByCodeAndTests + lib.OnlyOtherTests + lib.OnlyOtherTestsVar + lib.ShadowedInCode + lib.Listed + lib.UsedWithinLib
	var _ lib.OnlyOtherTestsType
	var _ lib.OnlyInAMethodOfATestOnlyType
	var r *lib.Result
	var _ lib.Field = r.Field
	var _ lib.Answer = r.Answer()
	var _ lib.Hidden
	_ = lib.KindB
	_ = errors.Is(nil, lib.ErrRefused)
	_ = lib.Unknown // not declared by lib: not a use of lib's names
}
