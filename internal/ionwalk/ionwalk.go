// Package ionwalk is the yardstick cdc's decoder is measured against: ion-go's
// own Reader visiting every value of a stream once, with no reflection and
// nothing kept (the bare walk of the benchmarks' "decoding per core" ratio).
package ionwalk

import "github.com/amazon-ion/ion-go/ion"

// Walk visits every value r yields once: scalars are read (integers at
// their size, so small ones are not made big), containers entered. It
// returns how many values it visited.
func Walk(r ion.Reader) (int, error) {
	n := 0
	for r.Next() {
		n++
		if r.IsNull() {
			continue
		}
		var err error
		switch r.Type() {
		case ion.StructType, ion.ListType, ion.SexpType:
			if err = r.StepIn(); err == nil {
				var m int
				m, err = Walk(r)
				n += m
				if err == nil {
					err = r.StepOut()
				}
			}
		case ion.BoolType:
			_, err = r.BoolValue()
		case ion.IntType:
			var size ion.IntSize
			if size, err = r.IntSize(); err == nil {
				if size == ion.BigInt {
					_, err = r.BigIntValue()
				} else {
					_, err = r.Int64Value()
				}
			}
		case ion.FloatType:
			_, err = r.FloatValue()
		case ion.DecimalType:
			_, err = r.DecimalValue()
		case ion.TimestampType:
			_, err = r.TimestampValue()
		case ion.StringType:
			_, err = r.StringValue()
		case ion.SymbolType:
			_, err = r.SymbolValue()
		case ion.BlobType, ion.ClobType:
			_, err = r.ByteValue()
		}
		if err != nil {
			return n, err
		}
	}
	return n, r.Err()
}
