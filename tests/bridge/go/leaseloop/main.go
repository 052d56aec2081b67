// Command leaseloop leases one task at a time from QUEUE for DURATION with Lease, deleting each,
// as a legacy Go worker does, sleeping a little after an empty lease. It prints one JSON object:
// every task it leased with the Unix time (ms) of its lease, and the errors it met.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"time"

	"google.golang.org/appengine"
	"google.golang.org/appengine/taskqueue"
)

func main() {
	queue := flag.String("queue", "paused", "queue name")
	duration := flag.Duration("for", 15*time.Second, "how long to lease")
	flag.Parse()
	ctx := appengine.BackgroundContext()

	type lease struct {
		Name string `json:"name"`
		At   int64  `json:"at_ms"`
	}
	var leases []lease
	var failures []string
	end := time.Now().Add(*duration)
	for time.Now().Before(end) {
		tasks, err := taskqueue.Lease(ctx, 1, *queue, 60)
		if err != nil {
			failures = append(failures, "Lease: "+err.Error())
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if len(tasks) == 0 {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		now := time.Now().UnixNano() / int64(time.Millisecond)
		for _, t := range tasks {
			leases = append(leases, lease{Name: t.Name, At: now})
		}
		if err := taskqueue.DeleteMulti(ctx, tasks, *queue); err != nil {
			failures = append(failures, "DeleteMulti: "+err.Error())
		}
	}
	out, _ := json.Marshal(map[string]interface{}{"leases": leases, "failures": failures})
	fmt.Println(string(out))
}
