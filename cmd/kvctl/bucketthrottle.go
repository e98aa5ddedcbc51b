package main

import (
	"encoding/json"
	"flag"
	"fmt"

	"kvd/protocol/binary"
	"kvd/tenant"
)

// queueFlags are bucket-throttle's SPEC section 7 settings, in the order
// they are sent; one left out is left out of the request, which kvd reads
// as "unchanged".
var queueFlags = []struct{ flag, field, usage string }{
	{"max-concurrent", "max_concurrent", "the bucket's data commands in flight at most, 0 = no limit `N`"},
	{"max-queued", "max_queued", "the bucket's commands waiting for a ticket at most, 0 = only the node's max_queue_depth `N`"},
	{"queue-timeout-ms", "queue_timeout_ms", "longest wait for a ticket, 0 = the node's ingress.queue_timeout_ms `N`"},
	{"deadline-ms", "deadline_ms", "deadline admission target, 0 = no deadline gate `N`"},
	{"deadline-percentile", "deadline_percentile", "execution-time percentile the gate predicts with, 50..99, 0 = 99 `N`"},
	{"expected-execution-us", "expected_execution_us", "the gate's prediction before it has a sample `N`"},
}

func bindBucketThrottle(fs *flag.FlagSet) runFunc {
	reserved, hard := &limit{}, &limit{}
	fs.Var(reserved, "reserved", "units per second the bucket is guaranteed `N|unlimited`")
	fs.Var(hard, "hard-limit", "units per second the bucket never exceeds `N|unlimited`")
	queue := make([]*limit, len(queueFlags))
	for i, f := range queueFlags {
		queue[i] = &limit{countOnly: true}
		fs.Var(queue[i], f.flag, f.usage)
	}
	return func(s *session, args []string) (*result, error) {
		var rest object
		for i, f := range queueFlags {
			if queue[i].given {
				rest = append(rest, member{f.field, queue[i]})
			}
		}
		if !reserved.given && !hard.given && len(rest) == 0 {
			return nil, usagef("nothing to set: give --reserved and/or --hard-limit (one left out becomes unlimited), or a queue/deadline flag")
		}
		send, now, err := bucketLimits(s, args[0], reserved, hard)
		if err != nil {
			return nil, err
		}
		if err := s.doJSON(binary.OpSetBucketThrottle, args[0], append(send, rest...)); err != nil {
			return nil, err
		}
		now = append(now, rest...) // what the bucket now has, as far as the request said
		return &result{
			text: "bucket " + args[0] + ": " + limitsText(now),
			json: okJSON(append(object{{"bucket", args[0]}}, now...)),
		}, nil
	}
}

// bucketLimits returns the reserved and hard_limit members to send in a
// bucket-throttle request, and the limits the bucket has after it. 0x2a
// reads a missing limit as unlimited, so with either flag only the given
// ones are sent and the other becomes unlimited; with neither (queue flags
// only) the bucket's current limits are read and sent back unchanged: in a
// cluster the totals from STAT cluster, on a single node STAT
// bucket_details NAME.
func bucketLimits(s *session, bucket string, reserved, hard *limit) (send, now object, err error) {
	if reserved.given || hard.given {
		if reserved.given {
			send = append(send, member{"reserved", reserved})
		}
		if hard.given {
			send = append(send, member{"hard_limit", hard})
		}
		return send, object{{"reserved", orUnlimited(reserved)}, {"hard_limit", orUnlimited(hard)}}, nil
	}
	c, err := s.conn()
	if err != nil {
		return nil, nil, err
	}
	// In a cluster bucket_details shows this node's share of the limits;
	// sent back, it would become the cluster's total. STAT cluster has the
	// totals (a node not in a cluster refuses it).
	if stats, err := c.Stats("cluster"); err == nil {
		var doc struct {
			Shares []struct {
				Bucket    string       `json:"bucket"`
				Reserved  tenant.Limit `json:"total_reserved"`
				HardLimit tenant.Limit `json:"total_hard_limit"`
			} `json:"shares"`
		}
		if len(stats) == 1 && json.Unmarshal([]byte(stats[0].Value), &doc) == nil {
			for _, sh := range doc.Shares {
				if sh.Bucket == bucket {
					send = object{{"reserved", &limit{given: true, v: sh.Reserved}}, {"hard_limit", &limit{given: true, v: sh.HardLimit}}}
					return send, send, nil
				}
			}
		}
		return nil, nil, fmt.Errorf("STAT cluster did not give bucket %s's cluster-wide limits (give --reserved and --hard-limit)", bucket)
	}
	stats, err := c.Stats("bucket_details " + bucket)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the current limits of bucket %s (STAT bucket_details; or give --reserved and --hard-limit): %w", bucket, err)
	}
	var cur struct {
		Reserved  *tenant.Limit `json:"throttle_reserved"`
		HardLimit *tenant.Limit `json:"throttle_hard_limit"`
	}
	for _, st := range stats {
		if st.Name == bucket {
			err = json.Unmarshal([]byte(st.Value), &cur)
		}
	}
	if err != nil || cur.Reserved == nil || cur.HardLimit == nil {
		return nil, nil, fmt.Errorf("STAT bucket_details %s did not give the bucket's current limits (give --reserved and --hard-limit)", bucket)
	}
	send = object{{"reserved", &limit{given: true, v: *cur.Reserved}}, {"hard_limit", &limit{given: true, v: *cur.HardLimit}}}
	return send, send, nil
}

func orUnlimited(l *limit) *limit {
	if l.given {
		return l
	}
	return &limit{given: true, v: tenant.Limit(tenant.Unlimited)}
}
