// Command txn runs datastore transactions with transactional taskqueue adds inside, as a Go App
// Engine app writes them (datastore.RunInTransaction, taskqueue.Add / AddMulti in the
// transaction's context), against whatever serves API_HOST:API_PORT, and prints what it saw as
// one JSON object for the test to check.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"google.golang.org/appengine"
	"google.golang.org/appengine/datastore"
	"google.golang.org/appengine/taskqueue"
)

type Order struct {
	Number int
}

var errRollBack = errors.New("roll back")

func main() {
	ctx := appengine.BackgroundContext()
	seen := map[string]interface{}{}
	names := []string{}

	// One task (Add), the add before the entity's write: not cross-group.
	err := datastore.RunInTransaction(ctx, func(tc context.Context) error {
		task, err := taskqueue.Add(tc, &taskqueue.Task{Payload: []byte("go-1"), Method: "PULL"}, "pulls")
		if err != nil {
			return err
		}
		names = append(names, task.Name)
		_, err = datastore.Put(tc, datastore.NewKey(tc, "Order", "", 1, nil), &Order{Number: 1})
		return err
	}, nil)
	seen["add"] = fmt.Sprint(err)

	// Two tasks (BulkAdd) under an existing entity's group.
	parent := datastore.NewKey(ctx, "Order", "", 2, nil)
	if _, err := datastore.Put(ctx, parent, &Order{Number: 2}); err != nil {
		seen["parent"] = err.Error()
	}
	err = datastore.RunInTransaction(ctx, func(tc context.Context) error {
		var order Order
		if err := datastore.Get(tc, parent, &order); err != nil {
			return err
		}
		tasks, err := taskqueue.AddMulti(tc, []*taskqueue.Task{
			{Payload: []byte("go-2a"), Method: "PULL", Tag: "t"},
			{Payload: []byte("go-2b"), Method: "PULL"},
		}, "pulls")
		if err != nil {
			return err
		}
		for _, task := range tasks {
			names = append(names, task.Name)
		}
		order.Number = 20
		_, err = datastore.Put(tc, parent, &order)
		return err
	}, nil)
	seen["add_multi"] = fmt.Sprint(err)

	// Rolled back: its task must never be delivered.
	err = datastore.RunInTransaction(ctx, func(tc context.Context) error {
		if _, err := taskqueue.Add(tc, &taskqueue.Task{Payload: []byte("go-3"), Method: "PULL"}, "pulls"); err != nil {
			return err
		}
		if _, err := datastore.Put(tc, datastore.NewKey(tc, "Order", "", 3, nil), &Order{Number: 3}); err != nil {
			return err
		}
		return errRollBack
	}, nil)
	seen["rolled_back"] = fmt.Sprint(err)

	// Six tasks in one transaction: the sixth add fails.
	err = datastore.RunInTransaction(ctx, func(tc context.Context) error {
		for i := 0; i < 6; i++ {
			if _, err := taskqueue.Add(tc, &taskqueue.Task{Payload: []byte(fmt.Sprintf("six-%d", i)), Method: "PULL"}, "pulls"); err != nil {
				return err
			}
		}
		return nil
	}, nil)
	seen["six"] = fmt.Sprint(err)

	seen["names"] = names
	out, _ := json.Marshal(seen)
	fmt.Fprintln(os.Stdout, string(out))
}
