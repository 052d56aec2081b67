// Command crashapp is an app of the outbox crash test (tests/outbox/test_crash.py) on the Go SDK:
// `crashapp START STEP STOP` runs, for each id in [START, STOP) by STEP not committed yet, one
// datastore.RunInTransaction that adds task "<id>" to queue "crash" transactionally (taskqueue.Add)
// and writes Order(id); ids divisible by 5 roll back. Its calls go to API_HOST:API_PORT, a bridge
// the test kills and restarts: a failed id is tried again, for up to a minute without a success.
package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"time"

	"google.golang.org/appengine"
	"google.golang.org/appengine/datastore"
	"google.golang.org/appengine/taskqueue"
)

type Order struct {
	Number int
}

var errRollBack = errors.New("roll back")

const giveUp = 60 * time.Second

func place(ctx context.Context, number int) error {
	key := datastore.NewKey(ctx, "Order", "", int64(number), nil)
	var order Order
	switch err := datastore.Get(ctx, key, &order); err {
	case nil:
		return nil // committed by an earlier run
	case datastore.ErrNoSuchEntity:
	default:
		return err
	}
	err := datastore.RunInTransaction(ctx, func(tc context.Context) error {
		task := &taskqueue.Task{Payload: []byte(strconv.Itoa(number)), Method: "PULL"}
		if _, err := taskqueue.Add(tc, task, "crash"); err != nil {
			return err
		}
		if _, err := datastore.Put(tc, key, &Order{Number: number}); err != nil {
			return err
		}
		time.Sleep(time.Duration(rand.Intn(10)) * time.Millisecond)
		if number%5 == 0 {
			return errRollBack
		}
		return nil
	}, nil)
	if err == errRollBack {
		return nil
	}
	return err
}

func main() {
	start, _ := strconv.Atoi(os.Args[1])
	step, _ := strconv.Atoi(os.Args[2])
	stop, _ := strconv.Atoi(os.Args[3])
	ctx := appengine.BackgroundContext()
	for number := start; number < stop; number += step {
		var failing time.Time
		for {
			err := place(ctx, number)
			if err == nil {
				break
			}
			if failing.IsZero() {
				failing = time.Now()
			}
			if time.Since(failing) > giveUp {
				fmt.Fprintf(os.Stderr, "id %d: no bridge for %v: %v\n", number, giveUp, err)
				os.Exit(1)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	fmt.Println("done")
}
