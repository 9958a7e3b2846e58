package e2e

import (
	"bufio"
	"net"
	"os"
	"testing"
	"time"
)

// A connection to a router's front from a known process reaches the real
// port through the pair's proxy, and a partition of that pair cuts it.
func TestFaultNetRoutesAndCutsAPair(t *testing.T) {
	fn, err := NewFaultNet(2, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer fn.Close()
	fn.SetPID(0, os.Getpid())
	ln, err := net.Listen("tcp", fn.Node(1).RaftReal)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				line, _ := bufio.NewReader(c).ReadString('\n')
				_, _ = c.Write([]byte("echo " + line))
				c.Close()
			}()
		}
	}()
	echo := func() (string, error) {
		c, err := net.DialTimeout("tcp", fn.Node(1).RaftFront, time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Write([]byte("hi\n")); err != nil {
			return "", err
		}
		return bufio.NewReader(c).ReadString('\n')
	}
	if got, err := echo(); err != nil || got != "echo hi\n" {
		t.Fatalf("through the front: %q %v", got, err)
	}
	fn.Partition([]int{0}, []int{1})
	if got, err := echo(); err == nil {
		t.Fatalf("a cut pair still answers: %q", got)
	}
	fn.Heal()
	if got, err := echo(); err != nil || got != "echo hi\n" {
		t.Fatalf("after heal: %q %v", got, err)
	}
}
