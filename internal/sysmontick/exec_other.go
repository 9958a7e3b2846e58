//go:build !unix

package sysmontick

func reexec(string, []string, []string) error { return ErrUnsupported }
