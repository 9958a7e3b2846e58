//go:build !cgo

package zmqsock

// Context is unavailable without cgo: NewContext returns ErrNoCgo.
type Context struct{}

// NewContext returns ErrNoCgo: this build has no libzmq.
func NewContext() (*Context, error) { return nil, ErrNoCgo }

// Term does nothing.
func (c *Context) Term() error { return nil }

// Socket is unavailable without cgo.
type Socket struct{}

// Socket returns ErrNoCgo.
func (c *Context) Socket(Type, Options) (*Socket, error) { return nil, ErrNoCgo }

// Bind returns ErrNoCgo.
func (s *Socket) Bind(string) error { return ErrNoCgo }

// Connect returns ErrNoCgo.
func (s *Socket) Connect(string) error { return ErrNoCgo }

// LastEndpoint returns ErrNoCgo.
func (s *Socket) LastEndpoint() (string, error) { return "", ErrNoCgo }

// Close does nothing.
func (s *Socket) Close() error { return nil }

// Send returns ErrNoCgo.
func (s *Socket) Send(...[]byte) error { return ErrNoCgo }

// SendDontWait returns ErrNoCgo.
func (s *Socket) SendDontWait(...[]byte) error { return ErrNoCgo }

// Recv returns ErrNoCgo.
func (s *Socket) Recv() ([][]byte, error) { return nil, ErrNoCgo }
