package felixconv

import (
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/proto/felix"
)

func TestIfaceName(t *testing.T) {
	for _, tc := range []struct {
		name, err string
	}{
		{"cali1234", ""},
		{strings.Repeat("x", 15), ""},
		{"eth0.100", ""},
		{"vxlan-v6", ""},
		{"", "empty"},
		{strings.Repeat("x", 16), "longer than 15 bytes"},
		{".", "not a valid interface name"},
		{"..", "not a valid interface name"},
		{"cali/1", `contains '/'`},
		{"eth0:1", `contains ':'`},
		{"cali 1", `contains ' '`},
		{"cali\t1", `contains '\t'`},
		{"cali\x001", `contains '\x00'`},
		{"cali\u00a0", `contains`}, // the kernel's isspace takes byte 0xa0 for space
	} {
		err := ifaceName("name (interface)", tc.name)
		checkErr(t, err, tc.err)
		if err != nil && !strings.HasPrefix(err.Error(), "name (interface)") {
			t.Errorf("%q: error %q does not name the field", tc.name, err)
		}
	}
}

// TestInterfaceNamesRejected: a bad name in either kind of endpoint is
// refused at the edge, naming the workload endpoint when its id is valid.
func TestInterfaceNamesRejected(t *testing.T) {
	u := validWEP()
	u.Endpoint.Name = "cali/../x"
	err := Validate(&felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: u}})
	checkErr(t, err, `name (interface) "cali/../x": contains '/'`)
	if e := asError(t, err); e.Endpoint == nil {
		t.Errorf("rejection does not name the endpoint: %+v", e)
	}

	for name, want := range map[string]string{"": "", "*": "", "eth0": "", "this-is-too-long0": "longer than 15 bytes"} {
		_, err := HostEndpoint(&felix.HostEndpointUpdate{Id: &felix.HostEndpointID{EndpointId: "h"}, Endpoint: &felix.HostEndpoint{Name: name}})
		checkErr(t, err, want)
	}
}
