package daemon

import (
	"time"

	instd "github.com/allox-os/allox/services/kuruwa/internal/instance"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// send types a send into the terminal tg: the text as one write (which the instance daemon
// makes one bracketed paste), then each key as its own write after the settle delay, which
// this daemon sleeps itself. Relayed whole, the instance daemon would go on typing (and press
// Enter) after a revocation closed the client; here every write checks first that the client
// was not cut and still holds the grant, and a cut ends the delay at once. The sequence holds
// the terminal's typing lock, so another sender's input never lands between its writes.
func (d *Daemon) send(c *client, tg target, a wire.SendArgs) error {
	// Refused here, as the instance daemon would refuse it, before anything is written.
	if _, err := instd.SendKeys(a); err != nil {
		return err
	}
	tg.ref.typing.Lock()
	defer tg.ref.typing.Unlock()
	if a.Text != "" || len(a.Keys) == 0 {
		if err := d.write(c, tg, wire.SendArgs{ID: tg.ref.id, Text: a.Text}); err != nil {
			return err
		}
	}
	settle := time.NewTimer(0)
	defer settle.Stop()
	for i, k := range a.Keys {
		if a.Text != "" || i > 0 {
			settle.Reset(time.Duration(a.SettleMS) * time.Millisecond)
			select {
			case <-settle.C:
			case <-c.cutCh:
				return errCut()
			}
		}
		if err := d.write(c, tg, wire.SendArgs{ID: tg.ref.id, Keys: []string{k}}); err != nil {
			return err
		}
	}
	return nil
}

// write relays one write of a send, once the client was not cut and the terminal still passes
// canAccess for it. It registers in c.writes under d.mu, so that a revocation, which marks c cut
// under d.mu, either comes first (and the write is refused) or waits for it in drain (and
// nothing is written after the revoke returns). The call itself runs without d.mu.
func (d *Daemon) write(c *client, tg target, a wire.SendArgs) error {
	d.mu.Lock()
	err := errCut()
	if !c.isCut() {
		err = d.recheckLocked(c, tg, d.canAccess)
	}
	if err == nil {
		c.writes.Add(1)
	}
	d.mu.Unlock()
	if err != nil {
		return err
	}
	defer c.writes.Done()
	return d.call(tg.sock, "send", a, nil)
}

func errCut() error {
	return wire.Errorf(wire.CodeRevoked, "", "a grant this send relied on was revoked; the rest of it was not typed")
}
