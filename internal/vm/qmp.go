package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"
)

// qmpArgs is -qmp on the Options.QMP unix socket, as Kata starts QEMU (server, no wait).
func (o Options) qmpArgs() []string {
	if o.QMP == "" {
		return nil
	}
	return []string{"-qmp", "unix:" + optEscape(o.QMP) + ",server=on,wait=off"}
}

// scsiControllerArgs is Kata's virtio-scsi controller (govmm SCSIController on PCI): Kata adds it
// at start and hot-plugs scsi-hd disks onto its bus scsi0.0.
func (o Options) scsiControllerArgs() []string {
	if !o.SCSIController {
		return nil
	}
	return []string{"-device", "virtio-scsi-pci,id=scsi0,disable-modern=false"}
}

// QMPError is an error QEMU answered a command with.
type QMPError struct {
	Command, Class, Desc string
}

func (e *QMPError) Error() string {
	return fmt.Sprintf("qmp %s: %s: %s", e.Command, e.Class, e.Desc)
}

// QMP runs one command on the VM's QMP socket (Options.QMP) and returns its "return" value. Each
// call is a session of its own: greeting, qmp_capabilities, the command; events are skipped.
func (v *VM) QMP(ctx context.Context, command string, args any) (json.RawMessage, error) {
	if v.opt.QMP == "" {
		return nil, fmt.Errorf("%w: QMP is empty: set Options.QMP to a socket path to talk to QEMU", ErrOptions)
	}
	return qmpCommand(ctx, v.opt.QMP, command, args)
}

// QMPCommand runs one command on the QMP socket of a QEMU this process may not have started (one
// adopted after a restart), as VM.QMP does.
func QMPCommand(ctx context.Context, socket, command string, args any) (json.RawMessage, error) {
	return qmpCommand(ctx, socket, command, args)
}

func qmpCommand(ctx context.Context, socket, command string, args any) (json.RawMessage, error) {
	var d net.Dialer
	var conn net.Conn
	var err error
	for { // QEMU creates the socket shortly after it starts
		if conn, err = d.DialContext(ctx, "unix", socket); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("qmp %s: connect %s: %w", command, socket, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	}
	dec, enc := json.NewDecoder(conn), json.NewEncoder(conn)
	var greeting struct {
		QMP json.RawMessage `json:"QMP"`
	}
	if err := dec.Decode(&greeting); err != nil || greeting.QMP == nil {
		return nil, fmt.Errorf("qmp %s: no QMP greeting on %s: %v", command, socket, err)
	}
	if _, err := qmpExchange(dec, enc, "qmp_capabilities", nil); err != nil {
		return nil, err
	}
	return qmpExchange(dec, enc, command, args)
}

// qmpExchange sends one command and reads until its answer, skipping asynchronous events.
func qmpExchange(dec *json.Decoder, enc *json.Encoder, command string, args any) (json.RawMessage, error) {
	req := map[string]any{"execute": command}
	if args != nil {
		req["arguments"] = args
	}
	if err := enc.Encode(req); err != nil {
		return nil, fmt.Errorf("qmp %s: send: %w", command, err)
	}
	for {
		var resp struct {
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Class string `json:"class"`
				Desc  string `json:"desc"`
			} `json:"error"`
			Event string `json:"event"`
		}
		if err := dec.Decode(&resp); err != nil {
			return nil, fmt.Errorf("qmp %s: read: %w", command, err)
		}
		switch {
		case resp.Event != "":
			continue
		case resp.Error != nil:
			return nil, &QMPError{Command: command, Class: resp.Error.Class, Desc: resp.Error.Desc}
		case resp.Return != nil:
			return resp.Return, nil
		default:
			return nil, errors.New("qmp " + command + ": an answer with neither return nor error")
		}
	}
}
