package felixconv

import "fmt"

// maxIfaceName is the longest interface name Linux accepts: IFNAMSIZ (16)
// less the terminating NUL.
const maxIfaceName = 15

// ifaceName checks an interface name as Linux's dev_valid_name does, so a
// name the kernel would refuse is rejected here with a reason instead of
// failing every apply: non-empty, at most 15 bytes, not "." or "..", and
// no '/', ':', NUL or whitespace.
func ifaceName(field, s string) error {
	if err := required(field, s); err != nil {
		return err
	}
	if len(s) > maxIfaceName {
		return fmt.Errorf("%s %q: longer than %d bytes", field, s, maxIfaceName)
	}
	if s == "." || s == ".." {
		return fmt.Errorf("%s %q: not a valid interface name", field, s)
	}
	for i := 0; i < len(s); i++ {
		if badIfaceByte(s[i]) {
			return fmt.Errorf("%s %q: contains %q", field, s, s[i])
		}
	}
	return nil
}

// badIfaceByte reports the bytes dev_valid_name refuses: '/', ':', NUL,
// and what the kernel's isspace calls space (ASCII whitespace and 0xa0).
// The kernel checks bytes, not characters, so this does too.
func badIfaceByte(b byte) bool {
	switch b {
	case '/', ':', 0, ' ', '\t', '\n', '\v', '\f', '\r', 0xa0:
		return true
	}
	return false
}
