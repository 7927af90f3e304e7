// Package proc starts the child processes of the tests, the demo's
// harnesses and the benchmarks — service binaries, etcd and the
// kube-apiserver, Ory Hydra, PostgreSQL — with one stop sequence: a signal
// (SIGTERM unless the program wants another), a bounded wait, then SIGKILL.
package proc

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/callerauth/callerauth/internal/kit/capture"
)

// Spec is one process to start.
type Spec struct {
	// Bin and Args are the program and its arguments; Env is added to the
	// current environment; Dir is its working directory (default ours).
	Bin  string
	Args []string
	Env  []string
	Dir  string
	// Output receives standard output and error. Default: a buffer that
	// [Process.Output] reads.
	Output io.Writer
	// Group runs the process in a process group of its own, signalled
	// whole, and killed if this process dies (for servers that start
	// children of their own).
	Group bool
	// Credential runs it as another user (PostgreSQL refuses root).
	Credential *syscall.Credential
	// StopSignal asks it to stop. Default SIGTERM.
	StopSignal syscall.Signal
	// StopTimeout is how long [Process.Stop] waits before SIGKILL. Default
	// 10 s.
	StopTimeout time.Duration
	// NetNS runs it in that network namespace (a path such as
	// /run/netns/NAME), through nsenter, which execs it: the process is
	// the program itself.
	NetNS string
}

// Process is a started process.
type Process struct {
	Name string
	spec Spec
	cmd  *exec.Cmd
	out  *capture.Buffer // nil when Spec.Output was given
	done chan struct{}
	err  error // the exit, once done is closed
}

// Start starts the process.
func Start(s Spec) (*Process, error) {
	if s.StopSignal == 0 {
		s.StopSignal = syscall.SIGTERM
	}
	if s.StopTimeout <= 0 {
		s.StopTimeout = 10 * time.Second
	}
	p := &Process{Name: filepath.Base(s.Bin), spec: s, done: make(chan struct{})}
	bin, args := s.Bin, s.Args
	if s.NetNS != "" {
		bin, args = "nsenter", append([]string{"--net=" + s.NetNS, "--", s.Bin}, s.Args...)
	}
	p.cmd = exec.Command(bin, args...) //nolint:gosec // the caller's own program and arguments.
	p.cmd.Env = append(os.Environ(), s.Env...)
	p.cmd.Dir = s.Dir
	out := s.Output
	if out == nil {
		p.out = &capture.Buffer{}
		out = p.out
	}
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if s.Group || s.Credential != nil {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: s.Group, Credential: s.Credential}
		if s.Group {
			p.cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
		}
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("proc: starting %s: %w", s.Bin, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

// Output is what the process has written so far ("" when Spec.Output
// took it).
func (p *Process) Output() string {
	if p.out == nil {
		return ""
	}
	return p.out.String()
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is how the process exited; valid once Done is closed.
func (p *Process) Err() error { return p.err }

// Signal sends sig to the process (to its group with Spec.Group).
func (p *Process) Signal(sig syscall.Signal) error {
	if p.spec.Group {
		return syscall.Kill(-p.cmd.Process.Pid, sig)
	}
	return p.cmd.Process.Signal(sig)
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Stop sends the stop signal, waits up to the stop timeout, then kills, and
// returns the exit error (nil for a clean exit). Stopping a process that
// has exited returns how it exited.
func (p *Process) Stop() error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	_ = p.Signal(p.spec.StopSignal)
	select {
	case <-p.done:
	case <-time.After(p.spec.StopTimeout):
		_ = p.Signal(syscall.SIGKILL)
		<-p.done
	}
	return p.err
}

// Exited waits up to timeout for the process to exit by itself and returns
// its exit code; ok is false when it is still running.
func (p *Process) Exited(timeout time.Duration) (code int, ok bool) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), true
	case <-time.After(timeout):
		return 0, false
	}
}
