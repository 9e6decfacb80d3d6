package tcbpf

import (
	"errors"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// fakeLister answers the filter and qdisc dumps with fixed results.
type fakeLister struct {
	filters []netlink.Filter
	qdiscs  []netlink.Qdisc
	err     error
}

func (f fakeLister) FilterList(netlink.Link, uint32) ([]netlink.Filter, error) {
	return f.filters, f.err
}

func (f fakeLister) QdiscList(netlink.Link) ([]netlink.Qdisc, error) { return f.qdiscs, f.err }

// A failed dump is an error, never "no filters": detach and adoption
// decide from it. Only a vanished device reads as empty.
func TestListFiltersErrorsAreNotAbsence(t *testing.T) {
	l := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "cali1", Index: 7}}
	ours := &netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{Priority: tcPriority, Handle: tcHandle}, Id: 3}
	clsact := &netlink.GenericQdisc{QdiscType: "clsact"}
	for _, tc := range []struct {
		name    string
		lister  fakeLister
		want    int
		wantErr bool
		clsact  bool
	}{
		{"filters", fakeLister{filters: []netlink.Filter{ours}, qdiscs: []netlink.Qdisc{clsact}}, 1, false, true},
		{"no clsact", fakeLister{}, 0, false, false},
		{"device gone", fakeLister{err: unix.ENODEV}, 0, false, false},
		{"link not found", fakeLister{err: netlink.LinkNotFoundError{}}, 0, false, false},
		{"permission", fakeLister{err: unix.EPERM}, 0, true, false},
		{"buffer", fakeLister{err: unix.ENOBUFS}, 0, true, false},
		{"interrupted dump", fakeLister{err: netlink.ErrDumpInterrupted}, 0, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, err := listFilters(tc.lister, l, tcParentIngress)
			if (err != nil) != tc.wantErr || len(fs) != tc.want {
				t.Fatalf("listFilters = %d filters, %v; want %d, error %v", len(fs), err, tc.want, tc.wantErr)
			}
			if tc.wantErr && !errors.Is(err, tc.lister.err) {
				t.Fatalf("error %v does not wrap %v", err, tc.lister.err)
			}
			has, err := hasClsact(tc.lister, l)
			if (err != nil) != tc.wantErr || has != tc.clsact {
				t.Fatalf("hasClsact = %v, %v; want %v, error %v", has, err, tc.clsact, tc.wantErr)
			}
		})
	}
}
