// Command pairs times N lease + delete pairs on a queue that is already filled: Lease (-mode
// plain), LeaseByTag with the next of -tags (-mode tag) or with an empty tag (-mode oldest),
// each batch then deleted with DeleteMulti. It prints the milliseconds of each lease and each delete, and the
// tasks leased, as one JSON object.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"time"

	"google.golang.org/appengine"
	"google.golang.org/appengine/taskqueue"
)

func main() {
	queue := flag.String("queue", "pairs", "queue name")
	mode := flag.String("mode", "plain", "plain, tag or oldest")
	tags := flag.String("tags", "", "comma-separated tags of -mode tag, one per pair in turn")
	n := flag.Int("n", 10, "pairs to time")
	max := flag.Int("max", 100, "tasks per lease")
	flag.Parse()
	ctx := appengine.BackgroundContext()

	var leaseMs, deleteMs, began, ended []float64
	var failures []string
	leased := 0
	for i := 0; i < *n; i++ {
		start := time.Now()
		var tasks []*taskqueue.Task
		var err error
		switch *mode {
		case "plain":
			tasks, err = taskqueue.Lease(ctx, *max, *queue, 60)
		case "tag":
			names := strings.Split(*tags, ",")
			tasks, err = taskqueue.LeaseByTag(ctx, *max, *queue, 60, names[i%len(names)])
		default:
			tasks, err = taskqueue.LeaseByTag(ctx, *max, *queue, 60, "")
		}
		if err != nil {
			failures = append(failures, "lease: "+err.Error())
			continue
		}
		between := time.Now()
		if len(tasks) > 0 {
			if err := taskqueue.DeleteMulti(ctx, tasks, *queue); err != nil {
				failures = append(failures, "DeleteMulti: "+err.Error())
				continue
			}
		}
		end := time.Now()
		leaseMs = append(leaseMs, float64(between.Sub(start).Microseconds())/1000)
		deleteMs = append(deleteMs, float64(end.Sub(between).Microseconds())/1000)
		began = append(began, float64(start.UnixNano())/1e9)
		ended = append(ended, float64(end.UnixNano())/1e9)
		leased += len(tasks)
	}
	out, _ := json.Marshal(map[string]interface{}{
		"lease_ms": leaseMs, "delete_ms": deleteMs, "leased": leased, "began": began, "ended": ended,
		"failures": failures,
	})
	fmt.Println(string(out))
}
