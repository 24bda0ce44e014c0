// Package errformat holds no code: its test, TestErrorFormatsAreShort,
// reads every non-test Go file of the module and fails on an error format
// over 160 characters: the format given to fmt.Errorf, errors.New or a
// function of the package that passes its format on to them (as a task's
// configErr), and the constant strings the Error methods of typed errors
// build their messages from. An error says the operation, the cause and the
// facts in one line; what to do about it is the task's hints table
// (docs/maintaining.md, "Add a refusal"), so a long format is most often a
// remedy that belongs there.
package errformat
