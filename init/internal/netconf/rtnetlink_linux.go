package netconf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

var nativeEndian = binary.NativeEndian

type attr struct {
	typ  uint16
	data []byte
}

// encode builds one netlink request: header, fixed-size body, 4-byte aligned attributes.
func encode(typ, flags uint16, body any, attrs []attr) ([]byte, error) {
	var b bytes.Buffer
	b.Write(make([]byte, unix.SizeofNlMsghdr))
	if err := binary.Write(&b, nativeEndian, body); err != nil {
		return nil, fmt.Errorf("BUG: encode %T: %w", body, err)
	}
	for _, a := range attrs {
		n := unix.SizeofRtAttr + len(a.data)
		_ = binary.Write(&b, nativeEndian, unix.RtAttr{Len: uint16(n), Type: a.typ})
		b.Write(a.data)
		b.Write(make([]byte, nlmAlign(n)-n))
	}
	msg := b.Bytes()
	nativeEndian.PutUint32(msg[0:4], uint32(len(msg)))
	nativeEndian.PutUint16(msg[4:6], typ)
	nativeEndian.PutUint16(msg[6:8], flags|unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	nativeEndian.PutUint32(msg[8:12], 1) // sequence number
	return msg, nil
}

func nlmAlign(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }

// request sends one message on a fresh NETLINK_ROUTE socket and waits for its acknowledgement.
func request(typ, flags uint16, body any, attrs ...attr) error {
	msg, err := encode(typ, flags, body, attrs)
	if err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink send: %w", err)
	}
	buf := make([]byte, 8192)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("netlink receive: %w", err)
		}
		if done, err := ack(buf[:n]); done {
			return err
		}
	}
}

// ack looks for the NLMSG_ERROR answer (error 0 is the acknowledgement) among the messages in buf.
func ack(buf []byte) (bool, error) {
	for len(buf) >= unix.SizeofNlMsghdr {
		l := int(nativeEndian.Uint32(buf[0:4]))
		typ := nativeEndian.Uint16(buf[4:6])
		if l < unix.SizeofNlMsghdr || l > len(buf) {
			return true, fmt.Errorf("netlink: malformed answer (length %d of %d)", l, len(buf))
		}
		if typ == unix.NLMSG_ERROR {
			if l < unix.SizeofNlMsghdr+4 {
				return true, fmt.Errorf("netlink: short error answer")
			}
			if errno := int32(nativeEndian.Uint32(buf[16:20])); errno != 0 {
				return true, syscall.Errno(-errno)
			}
			return true, nil
		}
		if nlmAlign(l) >= len(buf) {
			break
		}
		buf = buf[nlmAlign(l):]
	}
	return false, nil
}
