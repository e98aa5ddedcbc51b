package binary

import "testing"

func TestCheckFrameInfos(t *testing.T) {
	for _, tc := range []struct {
		fi   []byte
		want Status
	}{
		{nil, StatusOK},
		{AppendFrameInfo(nil, 0, nil), StatusOK},                                        // barrier
		{AppendFrameInfo(nil, 1, []byte{0, 1}), StatusNotSupported},                     // durability
		{AppendFrameInfo(AppendFrameInfo(nil, 0, nil), 9, nil), StatusUnknownFrameInfo}, // after a barrier
		{[]byte{0x02}, StatusInvalidArguments},                                          // truncated
	} {
		if st, reason := CheckFrameInfos(&Request{Magic: MagicAltRequest, FrameInfo: tc.fi}); st != tc.want {
			t.Errorf("frame infos % x: %v %q, want %v", tc.fi, st, reason, tc.want)
		}
	}
}

func TestPeekRequest(t *testing.T) {
	for _, alt := range []bool{false, true} {
		req := Request{Magic: MagicRequest, Opcode: OpSetQ, Opaque: 77, Extras: make([]byte, 8),
			Key: []byte("key"), Value: make([]byte, 1000)}
		if alt {
			req.Magic, req.FrameInfo = MagicAltRequest, AppendFrameInfo(nil, 0, nil)
		}
		frame := AppendRequest(nil, &req)
		got, n := PeekRequest(frame[:HeaderLen])
		if got.Opcode != OpSetQ || got.Opaque != 77 || got.Alt() != alt || n != 1000 {
			t.Errorf("alt %v: %+v, value %d; want SETQ, opaque 77, value 1000", alt, got, n)
		}
	}
}
