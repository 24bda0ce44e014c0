package lib_test

import "example.com/mod/lib"

var _ = lib.OnlyOwnExternalTests
