package lib

var _ = OnlyOwnTests
