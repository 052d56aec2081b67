// Command samples runs the pull-queue samples of the legacy App Engine Go documentation, as
// written there, against whatever serves API_HOST:API_PORT, and prints what each call returned
// as one JSON object for the test to check.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"google.golang.org/appengine"
	"google.golang.org/appengine/taskqueue"
)

type observed map[string]interface{}

func describe(err error) string {
	if err == nil {
		return "ok"
	}
	if err == taskqueue.ErrTaskAlreadyAdded {
		return "ErrTaskAlreadyAdded"
	}
	return err.Error()
}

func tasksOf(tasks []*taskqueue.Task) []map[string]interface{} {
	out := []map[string]interface{}{}
	for _, t := range tasks {
		out = append(out, map[string]interface{}{
			"name": t.Name, "payload": string(t.Payload), "tag": t.Tag, "retry_count": t.RetryCount,
		})
	}
	return out
}

func main() {
	ctx := appengine.BackgroundContext()
	seen := observed{}

	// Adding tasks to a pull queue: a task with a payload and a tag, method PULL.
	t := &taskqueue.Task{
		Payload: []byte("hello world"),
		Method:  "PULL",
		Tag:     "render",
	}
	_, err := taskqueue.Add(ctx, t, "pull-queue")
	seen["add"] = describe(err)
	time.Sleep(10 * time.Millisecond)
	for i := 0; i < 3; i++ {
		_, err = taskqueue.Add(ctx, &taskqueue.Task{Payload: []byte(fmt.Sprintf("other %d", i)), Method: "PULL", Tag: "other"}, "pull-queue")
		if err != nil {
			seen["add_other"] = describe(err)
		}
	}
	time.Sleep(10 * time.Millisecond)
	named := &taskqueue.Task{Name: "job-1", Payload: []byte("untagged"), Method: "PULL"}
	_, err = taskqueue.Add(ctx, named, "pull-queue")
	seen["add_named"] = describe(err)
	_, err = taskqueue.Add(ctx, named, "pull-queue")
	seen["add_named_again"] = describe(err)
	_, err = taskqueue.Add(ctx, &taskqueue.Task{Path: "/worker", Payload: []byte("push")}, "pull-queue")
	seen["add_push_task"] = describe(err)

	// Leasing tasks by tag.
	tasks, err := taskqueue.LeaseByTag(ctx, 100, "pull-queue", 3600, "render")
	seen["lease_by_tag"] = describe(err)
	seen["lease_by_tag_tasks"] = tasksOf(tasks)
	leased := tasks

	// Leasing by the oldest task's tag: an empty tag.
	tasks, err = taskqueue.LeaseByTag(ctx, 100, "pull-queue", 3600, "")
	seen["lease_oldest_tag"] = describe(err)
	seen["lease_oldest_tag_tasks"] = tasksOf(tasks)
	leased = append(leased, tasks...)

	// Leasing tasks.
	tasks, err = taskqueue.Lease(ctx, 100, "pull-queue", 3600)
	seen["lease"] = describe(err)
	seen["lease_tasks"] = tasksOf(tasks)
	leased = append(leased, tasks...)

	// Modifying a lease.
	if len(leased) > 0 {
		before := leased[0].ETA
		err = taskqueue.ModifyLease(ctx, leased[0], "pull-queue", 60)
		seen["modify_lease"] = describe(err)
		seen["modify_lease_moved_seconds"] = before.Sub(leased[0].ETA).Seconds()
		stale := *leased[0]
		stale.ETA = stale.ETA.Add(-time.Second)
		err = taskqueue.ModifyLease(ctx, &stale, "pull-queue", 60)
		seen["modify_stale_lease"] = describe(err)
	}

	// Deleting tasks.
	err = taskqueue.DeleteMulti(ctx, leased, "pull-queue")
	seen["delete_multi"] = describe(err)
	if len(leased) > 0 {
		err = taskqueue.DeleteMulti(ctx, leased[:1], "pull-queue")
		seen["delete_again"] = describe(err)
	}

	// Queue statistics.
	stats, err := taskqueue.QueueStats(ctx, []string{"pull-queue"})
	seen["queue_stats"] = describe(err)
	if len(stats) == 1 {
		seen["queue_stats_tasks"] = stats[0].Tasks
	}

	out, _ := json.Marshal(seen)
	fmt.Println(string(out))
	os.Exit(0)
}
