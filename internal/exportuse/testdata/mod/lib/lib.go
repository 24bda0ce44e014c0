// Package lib is the package whose names TestTestOnly judges.
package lib

import "errors"

// Names that code of another package uses, or tests of lib alone, or nobody.
var (
	UsedByCode, UsedByCodeAndTests, InMain     int
	OnlyOwnTests, OnlyOwnExternalTests, Unused int
)

// Names that only tests of other packages use.
var (
	OnlyOtherTests, OnlyOtherExternalTests, OnlyThroughAlias, ShadowedInCode int
	OnlyOtherTestsVar                                                        = 1
	Listed                                                                   int
	UsedWithinLib                                                            int
)

// OnlyOtherTestsType is a type only tests of other packages name.
type OnlyOtherTestsType struct{ A OnlyInAMethodOfATestOnlyType }

// Answer is what Result's method returns.
func (OnlyOtherTestsType) Answer() int { return UsedWithinLib }

// OnlyInAMethodOfATestOnlyType is reached from a test-only type only.
type OnlyInAMethodOfATestOnlyType int

// ErrRefused is a sentinel.
var ErrRefused = errors.New("refused")

// Result is what Run returns.
type Result struct {
	Field  Field
	hidden Hidden
}

// Field is the type of Result's field.
type Field int

// Hidden is the type of Result's unexported field.
type Hidden int

// Answer is what Result.Answer returns.
type Answer int

// Answer returns an Answer.
func (r *Result) Answer() Answer { return Answer(r.hidden) }

// Run is the API app calls.
func Run() *Result { return &Result{} }

// Kind is a kind of thing.
type Kind int

// The kinds.
const (
	KindA Kind = iota
	KindB
)

// Classify returns a Kind.
func Classify() Kind { return KindA }
