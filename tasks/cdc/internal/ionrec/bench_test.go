package ionrec

import "testing"

// BenchmarkReader reads the trigger-shaped records of triggerEvents, in
// each form, into records of the orders Shape, against ion-go reading the
// same bytes into the same records (readRef, every wanted scalar read).
func BenchmarkReader(b *testing.B) {
	events := triggerEvents()[:3] // the shapes Kestra writes for orders
	for _, form := range []string{"text", "binary"} {
		chunks := encodeEach(b, form == "binary", events)
		var size int64
		for _, c := range chunks {
			size += int64(len(c))
		}
		b.Run(form+"/ionrec", func(b *testing.B) {
			r, rec := NewReader(orders), NewRecord(&orders)
			b.SetBytes(size)
			for b.Loop() {
				for _, c := range chunks {
					var err error
					if form == "binary" {
						err = r.Binary(c, rec, func(*Record) error { return nil })
					} else {
						err = r.Text(c, rec)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(chunks)), "ns/record")
		})
		b.Run(form+"/ion-go", func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				for _, c := range chunks {
					if _, err := readRef(form == "binary", c); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(chunks)), "ns/record")
		})
	}
}
