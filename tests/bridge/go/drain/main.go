// Command drain adds TASKS pull tasks over TAGS tags (AddMulti, 100 per call), then drains the
// queue with WORKERS goroutines, each leasing by the oldest tag (LeaseByTag with an empty tag)
// and deleting each batch (DeleteMulti). It prints what it saw as one JSON object: every payload
// leased and how often, and the batches that mixed tags.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"google.golang.org/appengine"
	"google.golang.org/appengine/taskqueue"
)

func main() {
	queue := flag.String("queue", "drain", "queue name")
	total := flag.Int("tasks", 2000, "tasks to add")
	tags := flag.Int("tags", 50, "tags to spread them over")
	workers := flag.Int("workers", 4, "goroutines leasing at once")
	idle := flag.Duration("idle", 30*time.Second, "stop once every lease came back empty this long")
	settle := flag.Duration("settle", time.Second, "once every task was seen, stop after this long empty (a task handed out twice would still show)")
	flag.Parse()
	ctx := appengine.BackgroundContext()

	for start := 0; start < *total; start += 100 {
		var batch []*taskqueue.Task
		for i := start; i < start+100 && i < *total; i++ {
			batch = append(batch, &taskqueue.Task{
				Payload: []byte(fmt.Sprintf("%d", i)),
				Method:  "PULL",
				Tag:     fmt.Sprintf("tag-%d", i%*tags),
			})
		}
		if _, err := taskqueue.AddMulti(ctx, batch, *queue); err != nil {
			fmt.Fprintln(os.Stderr, "AddMulti:", err)
			os.Exit(1)
		}
	}

	var mu sync.Mutex
	counts := map[string]int{}
	batches, mixed := 0, 0
	var failures []string
	lastTask := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				tasks, err := taskqueue.LeaseByTag(ctx, 100, *queue, 60, "")
				if err != nil {
					mu.Lock()
					failures = append(failures, "LeaseByTag: "+err.Error())
					mu.Unlock()
					time.Sleep(100 * time.Millisecond)
					continue
				}
				mu.Lock()
				if len(tasks) == 0 {
					quiet := time.Since(lastTask)
					done := quiet > *idle || (len(counts) >= *total && quiet > *settle)
					mu.Unlock()
					if done {
						return
					}
					time.Sleep(100 * time.Millisecond)
					continue
				}
				lastTask = time.Now()
				batches++
				for _, t := range tasks {
					counts[string(t.Payload)]++
					if t.Tag != tasks[0].Tag {
						mixed++
						break
					}
				}
				mu.Unlock()
				if err := taskqueue.DeleteMulti(ctx, tasks, *queue); err != nil {
					mu.Lock()
					failures = append(failures, "DeleteMulti: "+err.Error())
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	twice := 0
	for _, n := range counts {
		if n > 1 {
			twice++
		}
	}
	out, _ := json.Marshal(map[string]interface{}{
		"distinct": len(counts), "twice": twice, "batches": batches, "mixed": mixed, "failures": failures,
	})
	fmt.Println(string(out))
}
