package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/cdcd-dev/cdcd/schema"
)

// Exit codes of `cdcd schema` (the same meaning as the rest of the CLI; a
// schema that fails `test` exits with schemaExitFailure).
const (
	schemaExitOK      = 0
	schemaExitFailure = 1
	schemaExitUsage   = 2
)

const schemaUsage = `cdcd schema — inspect the schema registry of a running daemon and resolve refused schemas

Usage:
  cdcd schema list                                 subjects: versions, latest id, compatibility, refusals
  cdcd schema show SUBJECT [VERSION]               one version (default latest): id and the schema, indented
  cdcd schema set-compat [--subject S] LEVEL       set the global level, or the subject's own
  cdcd schema set-compat --subject S --reset       drop the subject's own level (the global one applies)
  cdcd schema test --subject S [--version V] FILE  test an Avro schema file ("-": stdin) against version V
                                                   (default latest; "all": the versions the level selects)
  cdcd schema rejected                             schemas the registry refused, and why
  cdcd schema accept SUBJECT                       register SUBJECT's refused schema as its next version

LEVEL is BACKWARD (the default), BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL,
FULL_TRANSITIVE or NONE.

The registry lives in the daemon: every subcommand talks to its admin listener, named by
--admin HOST:PORT (or a URL), or read from admin.listen of -c FILE; default 127.0.0.1:8089.
--admin may also name any Confluent-compatible registry (rejected and accept are cdcd's own).

A table whose new schema is refused pauses. Resolve it with set-compat (for example NONE
for the subject, then back) or accept, and the table resumes where it stopped.
`

// schemaCLI is one invocation.
type schemaCLI struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	cl             *sr.Client
}

// errUsage marks errors that are the caller's usage (exit 2).
var errUsage = errors.New("usage")

// schemaCommand implements `cdcd schema ...`; args exclude "schema". It
// returns the process exit code.
func schemaCommand(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, schemaUsage)
		return schemaExitUsage
	}
	if isHelp(args[0]) {
		fmt.Fprint(stdout, schemaUsage)
		return schemaExitOK
	}
	c := &schemaCLI{stdin: stdin, stdout: stdout, stderr: stderr}
	cmds := map[string]func(context.Context, []string) error{
		"list":       c.list,
		"show":       c.show,
		"set-compat": c.setCompat,
		"test":       c.test,
		"rejected":   c.rejected,
		"accept":     c.accept,
	}
	run, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "cdcd schema: unknown subcommand %q\n\n%s", args[0], schemaUsage)
		return schemaExitUsage
	}
	err := run(ctx, args[1:])
	switch {
	case err == nil:
		return schemaExitOK
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "cdcd schema %s: %v\n", args[0], err)
		return schemaExitUsage
	case errors.Is(err, flag.ErrHelp):
		return schemaExitOK
	}
	fmt.Fprintf(stderr, "cdcd schema %s: %v\n", args[0], err)
	return schemaExitFailure
}

// flags parses args with the common flags plus the subcommand's own
// (added by def), allowing flags after positional arguments, and connects
// the client. It returns the positional arguments.
func (c *schemaCLI) flags(name string, args []string, def func(fs *flag.FlagSet)) ([]string, error) {
	fs := flag.NewFlagSet("cdcd schema "+name, flag.ContinueOnError)
	admin := fs.String("admin", "", "admin listener of the daemon, HOST:PORT or URL (default: admin.listen of -c, else 127.0.0.1:8089)")
	cfgPath := fs.String("c", "", "config file to read admin.listen from")
	if def != nil {
		def(fs)
	}
	pos, err := parseFlags(fs, args, schemaUsage, c.stdout)
	if err != nil {
		if errors.Is(err, errHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	ac, err := adminURL(*admin, *cfgPath)
	if err != nil {
		return nil, err
	}
	cl, err := sr.NewClient(append(ac.registryOpts(), sr.UserAgent("cdcd-schema"))...)
	if err != nil {
		return nil, fmt.Errorf("%w: --admin %s: %v", errUsage, ac.base, err)
	}
	c.cl = cl
	return pos, nil
}

// subjectLevel returns subject's level and whether it is its own.
func (c *schemaCLI) subjectLevel(ctx context.Context, subject string) (string, bool, error) {
	res := c.cl.Compatibility(ctx, subject)[0]
	if res.Err == nil {
		return res.Level.String(), true, nil
	}
	var re *sr.ResponseError
	if !errors.As(res.Err, &re) || re.ErrorCode != sr.ErrSubjectLevelCompatibilityNotConfigured.Code {
		return "", false, res.Err
	}
	g := c.cl.Compatibility(ctx)[0]
	return g.Level.String(), false, g.Err
}

func (c *schemaCLI) list(ctx context.Context, args []string) error {
	pos, err := c.flags("list", args, nil)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: unexpected arguments %v", errUsage, pos)
	}
	global, _, err := c.subjectLevel(ctx, "")
	if err != nil {
		return err
	}
	subjects, err := c.cl.Subjects(ctx)
	if err != nil {
		return err
	}
	rejected, err := c.fetchRejected(ctx)
	if err != nil {
		return err
	}
	refused := map[string]schema.RejectedSchema{}
	for _, r := range rejected {
		refused[r.Subject] = r
	}
	fmt.Fprintf(c.stdout, "global compatibility: %s\n", global)
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBJECT\tVERSIONS\tLATEST\tID\tCOMPATIBILITY\tSTATUS")
	for _, s := range subjects {
		versions, err := c.cl.SubjectVersions(ctx, s)
		if err != nil {
			return err
		}
		latest, err := c.cl.SchemaByVersion(ctx, s, -1)
		if err != nil {
			return err
		}
		level, own, err := c.subjectLevel(ctx, s)
		if err != nil {
			return err
		}
		if !own {
			level += " (global)"
		}
		status := "ok"
		if _, ok := refused[s]; ok {
			status = "REFUSED a new schema"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", s, joinInts(versions), latest.Version, latest.ID, level, status)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rejected) > 0 {
		fmt.Fprintln(c.stdout)
		c.printRejected(rejected)
	}
	return nil
}

func joinInts(vs []int) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func (c *schemaCLI) show(ctx context.Context, args []string) error {
	pos, err := c.flags("show", args, nil)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return fmt.Errorf("%w: want SUBJECT [VERSION]", errUsage)
	}
	ver := -1
	if len(pos) == 2 && pos[1] != "latest" {
		if ver, err = strconv.Atoi(pos[1]); err != nil || ver < 1 {
			return fmt.Errorf("%w: VERSION %q is not a positive number or \"latest\"", errUsage, pos[1])
		}
	}
	ss, err := c.cl.SchemaByVersion(ctx, pos[0], ver)
	if err != nil {
		return err
	}
	level, own, err := c.subjectLevel(ctx, pos[0])
	if err != nil {
		return err
	}
	if !own {
		level += " (global)"
	}
	fmt.Fprintf(c.stdout, "subject:       %s\nversion:       %d\nid:            %d\ncompatibility: %s\n", ss.Subject, ss.Version, ss.ID, level)
	var b bytes.Buffer
	if json.Indent(&b, []byte(ss.Schema.Schema), "", "  ") != nil {
		b.Reset()
		b.WriteString(ss.Schema.Schema)
	}
	fmt.Fprintf(c.stdout, "%s\n", b.String())
	return nil
}

func (c *schemaCLI) setCompat(ctx context.Context, args []string) error {
	var subject string
	var reset bool
	pos, err := c.flags("set-compat", args, func(fs *flag.FlagSet) {
		fs.StringVar(&subject, "subject", "", "the subject (default: the global level)")
		fs.BoolVar(&reset, "reset", false, "drop the subject's own level")
	})
	if err != nil {
		return err
	}
	target := "global"
	if subject != "" {
		target = subject
	}
	if reset {
		if subject == "" || len(pos) > 0 {
			return fmt.Errorf("%w: --reset takes --subject S and no LEVEL", errUsage)
		}
		res := c.cl.ResetCompatibility(ctx, subject)[0]
		if res.Err != nil {
			return res.Err
		}
		fmt.Fprintf(c.stdout, "%s: own level %s removed; the global level applies\n", subject, res.Level)
		return nil
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: want one LEVEL", errUsage)
	}
	level, err := schema.ParseCompatibility(pos[0])
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	var srLevel sr.CompatibilityLevel
	if err := srLevel.UnmarshalText([]byte(level.String())); err != nil {
		return err
	}
	var subjects []string
	if subject != "" {
		subjects = []string{subject}
	}
	res := c.cl.SetCompatibility(ctx, sr.SetCompatibility{Level: srLevel}, subjects...)[0]
	if res.Err != nil {
		return res.Err
	}
	fmt.Fprintf(c.stdout, "%s: compatibility %s\n", target, res.Level)
	return nil
}

func (c *schemaCLI) test(ctx context.Context, args []string) error {
	var subject, version string
	pos, err := c.flags("test", args, func(fs *flag.FlagSet) {
		fs.StringVar(&subject, "subject", "", "the subject to test against (required)")
		fs.StringVar(&version, "version", "latest", `version to test against: a number, "latest" or "all"`)
	})
	if err != nil {
		return err
	}
	if subject == "" || len(pos) != 1 {
		return fmt.Errorf("%w: want --subject S FILE", errUsage)
	}
	ver := -1
	switch version {
	case "latest":
	case "all":
		ver = -2
	default:
		if ver, err = strconv.Atoi(version); err != nil || ver < 1 {
			return fmt.Errorf("%w: --version %q is not a number, \"latest\" or \"all\"", errUsage, version)
		}
	}
	var text []byte
	if pos[0] == "-" {
		text, err = io.ReadAll(c.stdin)
	} else {
		text, err = os.ReadFile(pos[0])
	}
	if err != nil {
		return err
	}
	res, err := c.cl.CheckCompatibility(sr.WithParams(ctx, sr.Verbose), subject, ver, sr.Schema{Schema: string(text)})
	if err != nil {
		return err
	}
	if res.Is {
		fmt.Fprintf(c.stdout, "compatible with %s (version %s)\n", subject, version)
		return nil
	}
	fmt.Fprintf(c.stdout, "INCOMPATIBLE with %s (version %s):\n", subject, version)
	for _, m := range res.Messages {
		fmt.Fprintf(c.stdout, "  %s\n", m)
	}
	return errors.New("the schema is incompatible")
}

// fetchRejected reads cdcd's refused schemas; a registry without the route
// (any other Confluent-compatible one) has none.
func (c *schemaCLI) fetchRejected(ctx context.Context) ([]schema.RejectedSchema, error) {
	var out []schema.RejectedSchema
	err := c.cl.Do(ctx, http.MethodGet, "/cdcd/rejected", nil, &out)
	var re *sr.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	return out, err
}

func (c *schemaCLI) printRejected(rs []schema.RejectedSchema) {
	for _, r := range rs {
		fmt.Fprintf(c.stdout, "%s: a new schema was refused under %s (incompatible with version %d):\n", r.Subject, r.Level, r.Version)
		for _, m := range r.Messages {
			fmt.Fprintf(c.stdout, "  %s\n", m)
		}
		fmt.Fprintf(c.stdout, "  resolve: cdcd schema accept %s   (or: cdcd schema set-compat --subject %s NONE)\n", r.Subject, r.Subject)
	}
}

func (c *schemaCLI) rejected(ctx context.Context, args []string) error {
	pos, err := c.flags("rejected", args, nil)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: unexpected arguments %v", errUsage, pos)
	}
	rs, err := c.fetchRejected(ctx)
	if err != nil {
		return err
	}
	if len(rs) == 0 {
		fmt.Fprintln(c.stdout, "no refused schemas")
		return nil
	}
	c.printRejected(rs)
	return nil
}

func (c *schemaCLI) accept(ctx context.Context, args []string) error {
	pos, err := c.flags("accept", args, nil)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: want SUBJECT", errUsage)
	}
	var sv schema.SubjectVersion
	if err := c.cl.Do(ctx, http.MethodPost, "/cdcd/subjects/"+url.PathEscape(pos[0])+"/accept", nil, &sv); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "%s: accepted as version %d (id %d)\n", sv.Subject, sv.Version, sv.ID)
	return nil
}
