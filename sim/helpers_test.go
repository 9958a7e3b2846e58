package sim

import "sync"

type captureSender struct {
	mu   sync.Mutex
	msgs [][][]byte
}

func (c *captureSender) Send(f [][]byte) error {
	c.mu.Lock()
	c.msgs = append(c.msgs, f)
	c.mu.Unlock()
	return nil
}

func (c *captureSender) get() [][][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][][]byte(nil), c.msgs...)
}
