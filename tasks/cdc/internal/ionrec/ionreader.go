package ionrec

import (
	"errors"
	"math/big"
	"strings"

	"github.com/amazon-ion/ion-go/ion"
)

// errNoValue stands for an ion-go accessor that returned neither a value
// nor an error.
var errNoValue = errors.New("no value")

// ReadScalar reads the value an ion-go Reader is on into s, as this
// package's own readers would (a scalar in full, a container by its type),
// except that an int or a decimal coefficient beyond 64 bits is kept in
// Big instead of falling back. It is the ion-go path for records the fast
// readers leave to ion-go, and the oracle their tests compare with. An
// error is ion-go's.
func ReadScalar(r ion.Reader, s *Scalar) error {
	s.Type = r.Type()
	if r.IsNull() {
		s.Null = true
		return nil
	}
	switch s.Type {
	case ion.BoolType:
		b, err := r.BoolValue()
		if err = present(b, err); err != nil {
			return err
		}
		s.Bool = *b
	case ion.IntType:
		size, err := r.IntSize()
		if err != nil {
			return err
		}
		if size != ion.BigInt {
			n, err := r.Int64Value()
			if err = present(n, err); err != nil {
				return err
			}
			s.Neg, s.Mag = *n < 0, absInt64(*n)
			return nil
		}
		b, err := r.BigIntValue()
		if err = present(b, err); err != nil {
			return err
		}
		s.setMagnitude(b)
	case ion.FloatType:
		f, err := r.FloatValue()
		if err = present(f, err); err != nil {
			return err
		}
		s.Float = *f
	case ion.DecimalType:
		d, err := r.DecimalValue()
		if err = present(d, err); err != nil {
			return err
		}
		c, e := d.CoEx()
		s.Exp, s.NegZero = e, c.Sign() == 0 && strings.HasPrefix(d.String(), "-")
		s.setMagnitude(c)
		s.Neg = s.Neg || s.NegZero // Neg with Mag 0 is a negative zero
	case ion.TimestampType:
		ts, err := r.TimestampValue()
		if err = present(ts, err); err != nil {
			return err
		}
		s.Sec, s.Nsec, s.Prec = ts.GetDateTime().Unix(), int32(ts.GetDateTime().Nanosecond()), ts.GetPrecision()
	case ion.StringType:
		v, err := r.StringValue()
		if err = present(v, err); err != nil {
			return err
		}
		s.Bytes = []byte(*v)
	case ion.SymbolType:
		v, err := r.SymbolValue()
		if err = present(v, err); err != nil {
			return err
		}
		if v.Text == nil {
			s.NoText = true
		} else {
			s.Bytes = []byte(*v.Text)
		}
	case ion.BlobType, ion.ClobType:
		v, err := r.ByteValue()
		if err != nil {
			return err
		}
		s.Bytes = v
	}
	// A container is reported by its type; ion-go skips its contents on
	// the next Next.
	return nil
}

// setMagnitude sets Neg and Mag from b, or Big when |b| needs more than 64
// bits.
func (s *Scalar) setMagnitude(b *big.Int) {
	if a := new(big.Int).Abs(b); a.IsUint64() {
		s.Neg, s.Mag = b.Sign() < 0, a.Uint64()
		return
	}
	s.Big = b
}

// present turns an accessor's nil value without an error into errNoValue.
func present[T any](v *T, err error) error {
	if err == nil && v == nil {
		return errNoValue
	}
	return err
}

func absInt64(n int64) uint64 {
	if n < 0 {
		return uint64(-(n + 1)) + 1
	}
	return uint64(n)
}
