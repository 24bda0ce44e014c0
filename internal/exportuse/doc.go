// Package exportuse holds no code: its test, TestNoExportOnlyForOtherTests,
// reads every Go file of the module and fails naming each exported
// package-level name (constant, variable, type, function) that tests of
// another package use and that is not its package's API. Such a name is
// exported only so that a test in the wrong place can reach it: move the
// test beside the code it tests, or make it use the real API, and
// unexport the name (docs/maintaining.md, "The cdc rooms").
//
// A package's API is what the non-test code of other packages uses (a
// package main's too), its sentinel errors (Err…: callers match them with
// errors.Is), a short list of names kept with their reasons in the test
// (a task's output file names, mapping's parsers), and whatever the
// exported surface of those mentions: a function's signature, a type's
// exported fields and methods' signatures, a variable's type and value,
// the constants of a type. A package's own tests, internal or external,
// may use anything. Packages that exist to serve tests (internal/testenv,
// internal/kafkatest, internal/iongen) are exempt.
//
// The test reads syntax, not types: it judges package-level names, not
// methods or fields (a type that only a test-only method returns counts as
// API while that method is exported).
package exportuse
