package policysync

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseCredentials: any bytes (up to the size bound) and any file name
// give a clear error or credentials that pass every check; an error is
// short, printable ASCII and quotes nothing of the content; accepted
// credentials survive a round trip.
func FuzzParseCredentials(f *testing.F) {
	for _, s := range []string{
		`{"UID":"u1","Workload":"web-0","Namespace":"shop","ServiceAccount":"default"}`,
		`{"uid":"u1","workload":"db","namespace":"shop","serviceAccount":"sa"}`,
		`{"workload":"w","namespace":"n"}`,
		`{"uid":"other","workload":"w","namespace":"n"}`,
		`{"workload":"w","namespace":"a/b"}`,
		`{"workload":7}`, `[]`, `null`, `{`, `"x"`, "\xff\xfe", `{"workload":"w\u0000","namespace":"n"}`,
		`{"Workload":"w","workload":"v","namespace":"n"}`,
	} {
		f.Add([]byte(s), "u1")
	}
	f.Fuzz(func(t *testing.T, b []byte, uid string) {
		if len(b) > MaxCredentialsBytes {
			return // the reader refuses these unread
		}
		c, err := ParseCredentials(b, uid)
		if err != nil {
			msg := err.Error()
			if len(msg) > 200 {
				t.Fatalf("error of %d bytes: %q", len(msg), msg)
			}
			for i := 0; i < len(msg); i++ {
				if msg[i] < 0x20 || msg[i] > 0x7e {
					t.Fatalf("error holds byte %#x: %q", msg[i], msg)
				}
			}
			if len(b) >= 8 && strings.Contains(msg, string(b)) {
				t.Fatalf("error quotes the content: %q", msg)
			}
			return
		}
		if c.UID != uid || c.Workload == "" || c.Namespace == "" || strings.Contains(c.Namespace, "/") {
			t.Fatalf("accepted %+v for uid %q", c, uid)
		}
		for _, v := range []string{c.UID, c.Workload, c.Namespace, c.ServiceAccount} {
			if err := checkField(v); err != nil || !utf8.ValidString(v) {
				t.Fatalf("accepted field %q: %v", v, err)
			}
		}
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := ParseCredentials(again, uid)
		if err != nil || c2 != c {
			t.Fatalf("round trip: %+v -> %s -> %+v, %v", c, again, c2, err)
		}
	})
}
