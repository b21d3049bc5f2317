package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// exitHardStop: a graceful stop did not finish (the shutdown deadline
// passed or a second signal came). A restart is safe.
const exitHardStop = 3

// hardStopKey carries the hard-stop context from main to runCmd.
type hardStopKey struct{}

// signalContexts returns a context that ends at the first SIGINT or
// SIGTERM (graceful stop) and one that ends at the second (hard stop).
// A third signal is left to its default action: it kills the process.
func signalContexts() (soft, hard context.Context) {
	soft, stopSoft := context.WithCancel(context.Background())
	hard, stopHard := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		stopSoft()
		<-sigs
		stopHard()
		signal.Stop(sigs)
	}()
	return context.WithValue(soft, hardStopKey{}, hard), hard
}

// hardStopOf returns the hard-stop context main put into ctx; one that
// never ends if there is none (tests).
func hardStopOf(ctx context.Context) context.Context {
	if h, ok := ctx.Value(hardStopKey{}).(context.Context); ok {
		return h
	}
	return context.Background()
}
