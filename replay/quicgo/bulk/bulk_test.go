package bulk

import (
	"bufio"
	"strings"
	"testing"
)

func TestRequestLines(t *testing.T) {
	for _, c := range []struct {
		line          string
		method        string
		size, bitrate uint64
	}{
		{string(Request(Get, 500, 2000000)), Get, 500, 2000000},
		{string(Request(Get, 7, 0)), Get, 7, 0},
		{string(Request(Put, 12, 0)) + "body", Put, 12, 0},
	} {
		method, size, bitrate, err := ReadRequest(bufio.NewReader(strings.NewReader(c.line)))
		if err != nil || method != c.method || size != c.size || bitrate != c.bitrate {
			t.Errorf("%q: %s %d %d %v", c.line, method, size, bitrate, err)
		}
	}
	for _, bad := range []string{"GET /5?bitrate=0\n", "PUT /5?bitrate=8\n", "GET /5?rate=8\n", "GET /5?bitrate=x\n"} {
		if _, _, _, err := ReadRequest(bufio.NewReader(strings.NewReader(bad))); err == nil {
			t.Errorf("%q taken", bad)
		}
	}
}
