package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cdcd-dev/cdcd/log"
)

// Exit codes of `cdcd log` (the same meaning as the rest of the CLI).
const (
	logExitOK      = 0
	logExitFailure = 1
	logExitUsage   = 2
)

const logUsage = `cdcd log — inspect and operate the embedded log (the feel of Kafka's tools)

Usage:
  cdcd log topics        [--internal]                               list topics
  cdcd log topics        --create --topic T [--partitions N] [--cleanup delete|compact]
                         [--retention DUR] [--retention-bytes N] [--delete-retention DUR]
  cdcd log topics        --delete --topic T
  cdcd log describe      [--topic T] [--internal]                   partitions, offsets, sizes, config
  cdcd log produce       --topic T [--separator :] [--no-key] [--partition N] [--null VALUE]
                                                                    key:value lines from stdin
  cdcd log consume       --topic T [--partition N] [--from-beginning | --offset N | --timestamp RFC3339]
                         [--max N]                                  print partition, offset, timestamp, key, value
  cdcd log groups        [--group G]                                groups; with --group, lag per partition
  cdcd log reset-offsets --group G --topic T (--to-earliest | --to-latest | --to-datetime RFC3339)
                         [--partition N] [--execute]                plan (and with --execute, apply) a reset

Every subcommand takes --data-dir DIR (the log is DIR/log; default ./cdcd-data) or
--log-dir DIR (the log directory itself). Reading commands open the log read-only and
work while the daemon runs; produce, topics --create/--delete and reset-offsets --execute
need the daemon stopped (the log's lock names the running process).
`

// logCLI is one invocation: its streams and parsed common flags.
type logCLI struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	dataDir        string
	logDir         string
}

// logCommand implements `cdcd log ...`; args exclude "log" itself. It
// returns the process exit code.
func logCommand(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, logUsage)
		return logExitUsage
	}
	if isHelp(args[0]) {
		fmt.Fprint(stdout, logUsage)
		return logExitOK
	}
	c := &logCLI{stdin: stdin, stdout: stdout, stderr: stderr}
	cmds := map[string]func(context.Context, []string) error{
		"topics":        c.topics,
		"describe":      c.describe,
		"produce":       c.produce,
		"consume":       c.consume,
		"groups":        c.groups,
		"reset-offsets": c.resetOffsets,
	}
	run, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "cdcd log: unknown subcommand %q\n\n%s", args[0], logUsage)
		return logExitUsage
	}
	err := run(ctx, args[1:])
	var ue usageError
	switch {
	case err == nil:
		return logExitOK
	case errors.Is(err, flag.ErrHelp):
		return logExitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "cdcd log %s: %v\n", args[0], err)
		return logExitUsage
	default:
		fmt.Fprintf(stderr, "cdcd log %s: %v\n", args[0], err)
		return logExitFailure
	}
}

// usageError is a mistake in the command line (exit code 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// flags makes a subcommand's flag set with the common flags on it.
func (c *logCLI) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("cdcd log "+name, flag.ContinueOnError)
	fs.StringVar(&c.dataDir, "data-dir", "./cdcd-data", "cdcd data directory; the log is `DIR`/log")
	fs.StringVar(&c.logDir, "log-dir", "", "the log `DIR`ectory itself (overrides --data-dir)")
	return fs
}

// parse parses args (parseFlags: -h prints the usage on stdout) and
// rejects positional arguments.
func (c *logCLI) parse(fs *flag.FlagSet, args []string) error {
	pos, err := parseFlags(fs, args, logUsage, c.stdout)
	if err != nil {
		if errors.Is(err, errHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q (this command takes only flags)", pos[0])
	}
	return nil
}

func (c *logCLI) dir() string {
	if c.logDir != "" {
		return c.logDir
	}
	return filepath.Join(c.dataDir, "log")
}

// open opens the log read-only (safe beside a running daemon) or for
// writing (fails with the holder's PID while the daemon runs).
func (c *logCLI) open(write bool) (*log.Embedded, error) {
	logger := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts := log.Options{ReadOnly: !write, CleanupInterval: -1}
	l, err := log.Open(c.dir(), opts, logger)
	if errors.Is(err, log.ErrLocked) {
		return nil, fmt.Errorf("%w\n(this command writes to the log: stop the daemon first)", err)
	}
	return l, err
}

func (c *logCLI) topics(ctx context.Context, args []string) error {
	fs := c.flags("topics")
	internal := fs.Bool("internal", false, "also list internal topics (names beginning with _)")
	create := fs.Bool("create", false, "create --topic")
	del := fs.Bool("delete", false, "delete --topic and its data")
	topic := fs.String("topic", "", "topic `name`")
	parts := fs.Int("partitions", 1, "partitions of a new topic")
	cleanup := fs.String("cleanup", "delete", "cleanup policy of a new topic: delete or compact")
	retention := fs.Duration("retention", 0, "delete closed segments older than this (0 keeps forever)")
	retentionBytes := fs.Int64("retention-bytes", 0, "bound each partition's size in bytes (0: unbounded)")
	deleteRetention := fs.Duration("delete-retention", 0, "how long compaction keeps tombstones (default 24h)")
	if err := c.parse(fs, args); err != nil {
		return err
	}
	switch {
	case *create && *del:
		return usagef("--create and --delete exclude each other")
	case (*create || *del) && *topic == "":
		return usagef("--topic is required with --create and --delete")
	case *create:
		cfg := log.TopicConfig{Partitions: int32(*parts), Cleanup: log.CleanupPolicy(*cleanup), Retention: *retention,
			RetentionBytes: *retentionBytes, DeleteRetention: *deleteRetention}
		return c.withLog(true, func(l *log.Embedded) error {
			if err := l.CreateTopic(ctx, *topic, cfg); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "Created topic %s.\n", *topic)
			return nil
		})
	case *del:
		return c.withLog(true, func(l *log.Embedded) error {
			if err := l.DeleteTopic(ctx, *topic); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "Deleted topic %s.\n", *topic)
			return nil
		})
	}
	return c.withLog(false, func(l *log.Embedded) error {
		names, err := l.ListTopics(ctx)
		if err != nil {
			return err
		}
		for _, n := range names {
			if *internal || !log.IsInternalTopic(n) {
				fmt.Fprintln(c.stdout, n)
			}
		}
		return nil
	})
}

// withLog opens the log, runs fn and closes it.
func (c *logCLI) withLog(write bool, fn func(*log.Embedded) error) error {
	l, err := c.open(write)
	if err != nil {
		return err
	}
	err = fn(l)
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	return err
}

func (c *logCLI) describe(ctx context.Context, args []string) error {
	fs := c.flags("describe")
	topic := fs.String("topic", "", "topic `name` (default: every topic)")
	internal := fs.Bool("internal", false, "include internal topics when describing all")
	if err := c.parse(fs, args); err != nil {
		return err
	}
	return c.withLog(false, func(l *log.Embedded) error {
		names := []string{*topic}
		if *topic == "" {
			all, err := l.ListTopics(ctx)
			if err != nil {
				return err
			}
			names = names[:0]
			for _, n := range all {
				if *internal || !log.IsInternalTopic(n) {
					names = append(names, n)
				}
			}
		}
		last := map[string]time.Time{}
		for _, ps := range l.Stats().Partitions {
			last[fmt.Sprintf("%s/%d", ps.Topic, ps.Partition)] = ps.LastAppend
		}
		for _, n := range names {
			info, err := l.DescribeTopic(ctx, n)
			if err != nil {
				return err
			}
			cfg := info.Config
			fmt.Fprintf(c.stdout, "Topic: %s\tPartitions: %d\tCleanup: %s\tRetention: %v\tRetentionBytes: %d\tDeleteRetention: %v\tID: %s\n",
				n, cfg.Partitions, cfg.Cleanup, cfg.Retention, cfg.RetentionBytes, cfg.DeleteRetention, info.ID)
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "\tPARTITION\tSTART\tEND\tRECORDS\tBYTES\tLOST")
			for _, p := range info.Partitions {
				fmt.Fprintf(tw, "\t%d\t%d\t%d\t%d\t%d\t%s\n", p.Partition, p.Start, p.End, p.End-p.Start, p.Bytes, lostRanges(p.Lost))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, p := range info.Partitions {
				for _, r := range p.Lost {
					fmt.Fprintf(c.stdout, "  partition %d lost offsets [%d, %d): %s\n", p.Partition, r.From, r.To, r.Reason)
				}
			}
		}
		return nil
	})
}

// lostRanges writes a partition's lost offset ranges, "-" for none.
func lostRanges(lost []log.LostRange) string {
	if len(lost) == 0 {
		return "-"
	}
	parts := make([]string, len(lost))
	for i, r := range lost {
		parts[i] = fmt.Sprintf("[%d,%d)", r.From, r.To)
	}
	return strings.Join(parts, " ")
}

func (c *logCLI) produce(ctx context.Context, args []string) error {
	fs := c.flags("produce")
	topic := fs.String("topic", "", "topic `name` (required)")
	sep := fs.String("separator", ":", "separates key from value on each line")
	noKey := fs.Bool("no-key", false, "lines are values only (records get a nil key)")
	partition := fs.Int("partition", -1, "partition for every record (default: by key, Kafka's murmur2)")
	null := fs.String("null", "", "a value equal to this `token` is produced as nil (a tombstone); empty: never")
	if err := c.parse(fs, args); err != nil {
		return err
	}
	if *topic == "" {
		return usagef("--topic is required")
	}
	if *sep == "" && !*noKey {
		return usagef("--separator must not be empty")
	}
	return c.withLog(true, func(l *log.Embedded) error {
		sc := bufio.NewScanner(c.stdin)
		sc.Buffer(make([]byte, 64<<10), log.MaxRecordBytes)
		var batch []log.Record
		total, line := 0, 0
		flush := func() error {
			if len(batch) == 0 {
				return nil
			}
			if err := l.Produce(ctx, *topic, batch); err != nil {
				return err
			}
			total += len(batch)
			batch = batch[:0]
			return nil
		}
		for sc.Scan() {
			line++
			rec, err := parseLine(sc.Text(), *sep, *noKey, *null)
			if err != nil {
				return usagef("stdin line %d: %v", line, err)
			}
			rec.Partition = int32(*partition)
			batch = append(batch, rec)
			if len(batch) == 1000 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := sc.Err(); err != nil {
			return err
		}
		if err := flush(); err != nil {
			return err
		}
		fmt.Fprintf(c.stderr, "Produced %d records to %s.\n", total, *topic)
		return nil
	})
}

// parseLine turns one input line into a record.
func parseLine(s, sep string, noKey bool, null string) (log.Record, error) {
	var rec log.Record
	val := s
	if !noKey {
		k, v, ok := strings.Cut(s, sep)
		if !ok {
			return rec, fmt.Errorf("no separator %q (use key%svalue, or --no-key)", sep, sep)
		}
		rec.Key, val = []byte(k), v
	}
	if null == "" || val != null {
		rec.Value = []byte(val)
	}
	return rec, nil
}

func (c *logCLI) consume(ctx context.Context, args []string) error {
	fs := c.flags("consume")
	topic := fs.String("topic", "", "topic `name` (required)")
	partition := fs.Int("partition", -1, "read only this partition (default: all)")
	fromBeginning := fs.Bool("from-beginning", false, "start at each partition's first record")
	offset := fs.Int64("offset", -1, "start at this offset (requires --partition)")
	timestamp := fs.String("timestamp", "", "start at the first record at or after this RFC3339 `time`")
	maxRecs := fs.Int("max", 0, "stop after this many records (0: all)")
	raw := fs.Bool("raw", false, "print partition, offset, timestamp, key and value as bytes, tab-separated (no Avro decoding)")
	if err := c.parse(fs, args); err != nil {
		return err
	}
	if *topic == "" {
		return usagef("--topic is required")
	}
	starts := 0
	for _, set := range []bool{*fromBeginning, *offset >= 0, *timestamp != ""} {
		if set {
			starts++
		}
	}
	if starts > 1 {
		return usagef("use only one of --from-beginning, --offset and --timestamp")
	}
	if *offset >= 0 && *partition < 0 {
		return usagef("--offset needs --partition")
	}
	var ts time.Time
	if *timestamp != "" {
		var err error
		if ts, err = time.Parse(time.RFC3339Nano, *timestamp); err != nil {
			return usagef("--timestamp: %v", err)
		}
	}
	return c.withLog(false, func(l *log.Embedded) error {
		info, err := l.DescribeTopic(ctx, *topic)
		if err != nil {
			return err
		}
		if *partition >= len(info.Partitions) {
			return usagef("--partition %d: %s has %d partitions", *partition, *topic, len(info.Partitions))
		}
		w := bufio.NewWriter(c.stdout)
		defer w.Flush()
		print := printRaw
		if !*raw {
			dec, err := newAvroDecoder(ctx, l)
			if err != nil {
				return err
			}
			print = dec.print
		}
		printed := 0
		for _, p := range info.Partitions {
			if *partition >= 0 && p.Partition != int32(*partition) {
				continue
			}
			from := p.End // like Kafka's console consumer: new records only, by default
			switch {
			case *fromBeginning:
				from = p.Start
			case *offset >= 0:
				from = *offset
			case *timestamp != "":
				if from, err = l.OffsetForTime(ctx, *topic, p.Partition, ts); err != nil {
					return err
				}
			}
			n, err := c.consumePartition(ctx, l, w, print, *topic, p, from, *maxRecs-printed, *maxRecs > 0)
			printed += n
			if err != nil {
				return err
			}
			if *maxRecs > 0 && printed >= *maxRecs {
				break
			}
		}
		return w.Flush()
	})
}

// consumePartition prints records of one partition from offset to its end
// (at most limit when bounded) and returns how many it printed. Offsets
// the log lost are reported on stderr and stepped over.
func (c *logCLI) consumePartition(ctx context.Context, l *log.Embedded, w *bufio.Writer, print func(*bufio.Writer, *log.Record),
	topic string, p log.PartitionInfo, from int64, limit int, bounded bool) (int, error) {
	n := 0
	for off := from; off < p.End && (!bounded || n < limit); {
		recs, err := l.Fetch(ctx, topic, p.Partition, off, log.FetchOptions{})
		var dl *log.DataLossError
		if errors.As(err, &dl) {
			_ = w.Flush()
			fmt.Fprintf(c.stderr, "partition %d: offsets [%d, %d) were lost: %s\n", dl.Partition, dl.From, dl.To, dl.Reason)
			off = dl.To
			continue
		}
		if err != nil {
			return n, err
		}
		if len(recs) == 0 {
			break
		}
		for i := range recs {
			if bounded && n >= limit {
				break
			}
			print(w, &recs[i])
			n++
		}
		off = recs[len(recs)-1].Offset + 1
	}
	return n, nil
}

// printRaw prints r as partition, offset, timestamp, key and value,
// tab-separated (--raw).
func printRaw(w *bufio.Writer, r *log.Record) {
	fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%s\n", r.Partition, r.Offset, r.Timestamp.UTC().Format(time.RFC3339Nano), printable(r.Key), printable(r.Value))
}

// printable shows bytes as text when they are printable UTF-8, else Go-quoted;
// nil prints as null (as Kafka's console consumer does).
func printable(b []byte) string {
	if b == nil {
		return "null"
	}
	s := string(b)
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

func (c *logCLI) groups(ctx context.Context, args []string) error {
	fs := c.flags("groups")
	group := fs.String("group", "", "describe this group: lag per partition")
	if err := c.parse(fs, args); err != nil {
		return err
	}
	return c.withLog(false, func(l *log.Embedded) error {
		groups := []string{*group}
		if *group == "" {
			var err error
			if groups, err = l.ListGroups(ctx); err != nil {
				return err
			}
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tCOMMITTED\tEND\tLAG\tLAG-SECONDS")
		for _, g := range groups {
			lags, err := l.GroupLag(ctx, g)
			if err != nil {
				return err
			}
			if len(lags) == 0 && *group != "" {
				return fmt.Errorf("group %q has no committed offsets", g)
			}
			for _, lag := range lags {
				committed := "-"
				if lag.Committed >= 0 {
					committed = strconv.FormatInt(lag.Committed, 10)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%.3f\n", g, lag.Topic, lag.Partition, committed, lag.End, lag.Records, lag.Seconds)
			}
		}
		return tw.Flush()
	})
}

func (c *logCLI) resetOffsets(ctx context.Context, args []string) error {
	fs := c.flags("reset-offsets")
	group := fs.String("group", "", "consumer `group` (required)")
	topic := fs.String("topic", "", "topic `name` (required)")
	partition := fs.Int("partition", -1, "reset only this partition (default: all)")
	earliest := fs.Bool("to-earliest", false, "reset to each partition's start")
	latest := fs.Bool("to-latest", false, "reset to each partition's end")
	datetime := fs.String("to-datetime", "", "reset to the first record at or after this RFC3339 `time`")
	execute := fs.Bool("execute", false, "apply the plan (default: only print it, as Kafka's tool does)")
	if err := c.parse(fs, args); err != nil {
		return err
	}
	if *group == "" || *topic == "" {
		return usagef("--group and --topic are required")
	}
	n := 0
	for _, set := range []bool{*earliest, *latest, *datetime != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return usagef("use exactly one of --to-earliest, --to-latest and --to-datetime")
	}
	var ts time.Time
	if *datetime != "" {
		var err error
		if ts, err = time.Parse(time.RFC3339Nano, *datetime); err != nil {
			return usagef("--to-datetime: %v", err)
		}
	}
	return c.withLog(*execute, func(l *log.Embedded) error {
		info, err := l.DescribeTopic(ctx, *topic)
		if err != nil {
			return err
		}
		plan := map[int32]int64{}
		for _, p := range info.Partitions {
			if *partition >= 0 && p.Partition != int32(*partition) {
				continue
			}
			switch {
			case *earliest:
				plan[p.Partition] = p.Start
			case *latest:
				plan[p.Partition] = p.End
			default:
				if plan[p.Partition], err = l.OffsetForTime(ctx, *topic, p.Partition, ts); err != nil {
					return err
				}
			}
		}
		if len(plan) == 0 {
			return usagef("--partition %d: %s has %d partitions", *partition, *topic, len(info.Partitions))
		}
		return c.applyReset(ctx, l, *group, *topic, plan, *execute)
	})
}

// applyReset prints the plan and, with execute, commits it.
func (c *logCLI) applyReset(ctx context.Context, l *log.Embedded, group, topic string, plan map[int32]int64, execute bool) error {
	old, err := l.CommittedOffsets(ctx, group, topic)
	if err != nil {
		return err
	}
	parts := make([]int32, 0, len(plan))
	for p := range plan {
		parts = append(parts, p)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tCURRENT\tNEW")
	for _, p := range parts {
		cur := "-"
		if o, ok := old[p]; ok {
			cur = strconv.FormatInt(o, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\n", group, topic, p, cur, plan[p])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !execute {
		fmt.Fprintln(c.stderr, "Dry run: nothing changed. Add --execute (with the daemon stopped) to apply.")
		return nil
	}
	if err := l.CommitOffsets(ctx, group, topic, plan); err != nil {
		return err
	}
	fmt.Fprintln(c.stderr, "Offsets reset.")
	return nil
}
