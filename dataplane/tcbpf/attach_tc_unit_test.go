package tcbpf

import (
	"errors"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
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

// What is attached decides what dpd detaches and releases: a failed TCX
// query or filter dump is an error, never "nothing attached"; only a
// vanished interface reads as empty.
func TestReadAttachedErrorsAreNotAbsence(t *testing.T) {
	filter := &netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{Priority: tcPriority, Handle: tcHandle}, Id: 9}
	tcx := func(err error, ids ...ebpf.ProgramID) func(link.QueryOptions) (*link.QueryResult, error) {
		return func(link.QueryOptions) (*link.QueryResult, error) {
			if err != nil {
				return nil, err
			}
			res := &link.QueryResult{}
			for _, id := range ids {
				res.Programs = append(res.Programs, link.AttachedProgram{ID: id})
			}
			return res, nil
		}
	}
	for _, tc := range []struct {
		name    string
		query   func(link.QueryOptions) (*link.QueryResult, error)
		nl      fakeLister
		want    []ebpf.ProgramID
		wantErr error
	}{
		{"tcx and legacy", tcx(nil, 4), fakeLister{filters: []netlink.Filter{filter}}, []ebpf.ProgramID{4, 4, 9, 9}, nil},
		{"nothing attached", tcx(nil), fakeLister{}, nil, nil},
		{"interface gone at the tcx query", tcx(unix.ENODEV), fakeLister{}, nil, nil},
		{"tcx query refused", tcx(unix.EPERM), fakeLister{}, nil, unix.EPERM},
		{"tcx query out of memory", tcx(unix.ENOMEM), fakeLister{}, nil, unix.ENOMEM},
		{"filter dump failed", tcx(nil, 4), fakeLister{err: netlink.ErrDumpInterrupted}, nil, netlink.ErrDumpInterrupted},
		{"filter dump out of memory", tcx(nil), fakeLister{err: unix.ENOBUFS}, nil, unix.ENOBUFS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readAttached(tc.query, tc.nl, 7)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || got != nil {
					t.Fatalf("readAttached = %v, %v; want an error wrapping %v", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("readAttached = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
