package app_test

import (
	l2 "example.com/mod/lib"
)

var _ = l2.OnlyThroughAlias + l2.OnlyOtherExternalTests
