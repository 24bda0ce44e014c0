package change

import (
	"fmt"
	"math/big"
	"strings"

	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// BadValue builds an ErrBadValue cause.
func BadValue(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadValue, fmt.Sprintf(format, args...))
}

var (
	bigTen = big.NewInt(10)
)

// pow10 returns 10^n.
func pow10(n int) *big.Int { return new(big.Int).Exp(bigTen, big.NewInt(int64(n)), nil) }

// Rescale returns coef × 10^exp as an unscaled integer at t.scale, refusing
// lost digits and values with more than t.prec digits. Work is bounded: no
// power of ten above 10^(prec+digits) is ever computed.
func Rescale(coef *big.Int, exp int64, t mapping.Type) (*big.Int, error) {
	if coef.Sign() == 0 {
		return new(big.Int), nil
	}
	digits := int64(len(new(big.Int).Abs(coef).String()))
	shift := exp + int64(t.Scale)
	if digits+shift > int64(t.Prec) {
		return nil, BadValue("%s does not fit Decimal(%d, %d)", decimalText(coef, exp), t.Prec, t.Scale)
	}
	if shift >= 0 {
		return new(big.Int).Mul(coef, pow10(int(shift))), nil
	}
	if -shift > digits {
		return nil, BadValue("%s has more than %d decimal places", decimalText(coef, exp), t.Scale)
	}
	q, rem := new(big.Int).QuoRem(coef, pow10(int(-shift)), new(big.Int))
	if rem.Sign() != 0 {
		return nil, BadValue("%s has more than %d decimal places", decimalText(coef, exp), t.Scale)
	}
	return q, nil
}

func decimalText(coef *big.Int, exp int64) string {
	return ShortNumber(fullDecimalText(coef, exp))
}

func fullDecimalText(coef *big.Int, exp int64) string {
	switch {
	case exp < -60 || exp > 60:
		return fmt.Sprintf("%se%d", coef.String(), exp)
	case exp >= 0:
		return coef.String() + strings.Repeat("0", int(exp))
	}
	return string(AppendDecimal(nil, coef.String(), int(-exp)))
}

// ShortNumber bounds the text of a number quoted in a refusal: a value of
// thousands of digits is named by its first digits and its length, so a
// refusal stays one readable line.
func ShortNumber(s string) string {
	const shown = 40
	if len(s) <= shown+20 {
		return s
	}
	return fmt.Sprintf("%s… (%d characters)", s[:shown], len(s))
}
