package felixwire

import (
	"errors"
	"testing"
)

// FuzzDecode: no input panics the decoder, every failure is an *Error, and
// every success is a message in the current form.
func FuzzDecode(f *testing.F) {
	f.Add(cat(varint(seq, 1), sub(wepUpdate, sub(1, wepID()), sub(5, sub(7, str(1, "t"), str(2, "t.a"))))))
	f.Add(cat(varint(seq, 2), sub(policyUpdate, sub(1, str(1, "t"), str(2, "ns/staged:knp.default.x")), sub(2))))
	f.Add(cat(varint(seq, 3), sub(routeUpdate, varint(1, 4), str(3, "10.0.0.0/8"))))
	f.Add(cat(sub(hostMetaV46, str(1, "n")), sub(hostMetaUp, str(1, "n"), str(2, "192.0.2.1"))))
	f.Fuzz(func(t *testing.T, b []byte) {
		d := NewDecoder()
		for range 2 { // twice: the second sees what the first taught the session
			r, err := d.Decode(b)
			var e *Error
			switch {
			case err != nil && !errors.As(err, &e):
				t.Fatalf("error %T %v is not an *Error", err, err)
			case err == nil && r.Msg == nil:
				t.Fatal("no message and no error")
			}
		}
	})
}
