package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"

	"github.com/shaledb/shale/promql"
	"github.com/shaledb/shale/storage"
	"github.com/shaledb/shale/storage/lsm"
)

// snapshotCommand is the first argument that makes tsdb manage snapshots.
const snapshotCommand = "snapshot"

// snapshotConfig is the settings of tsdb snapshot.
type snapshotConfig struct {
	cmd            string // list, delete or copy
	name           string
	storagePath    string
	objstoreConfig string
	toStoragePath  string
	toObjstore     string
	log            promslog.Config
}

func parseSnapshotFlags(args []string) (*snapshotConfig, error) {
	cfg := &snapshotConfig{log: promslog.Config{}}
	app := kingpin.New("tsdb snapshot", "Manage the snapshots of a Shale database: POST /api/v1/admin/tsdb/snapshot (with --web.enable-admin-api) takes one; "+
		"it keeps the data as it was in the object store until it is deleted. Copying it makes a database of its own, which a server started on it serves (a backup, or a restore).")
	app.HelpFlag.Short('h')
	bucketFlags(app, &cfg.storagePath, &cfg.objstoreConfig)
	promslogflag.AddFlags(app, &cfg.log)

	app.Command("list", "List the snapshots: name, when it was taken, its tables and their size.")
	del := app.Command("delete", "Delete a snapshot; the running writer's garbage collection then frees what only it kept.")
	del.Arg("name", "The snapshot's name.").Required().StringVar(&cfg.name)
	cp := app.Command("copy", "Copy a snapshot to an empty place as a database of its own: start a server there to read it or to go on from it.")
	cp.Arg("name", "The snapshot's name.").Required().StringVar(&cfg.name)
	cp.Flag("to.storage.path", "Folder to copy to (a local object store), used when no --to.objstore.config-file is given.").
		StringVar(&cfg.toStoragePath)
	cp.Flag("to.objstore.config-file", "Object store config file of the place to copy to (its bucket and prefix).").
		StringVar(&cfg.toObjstore)

	cmd, err := parseCommand(app, args, "name a command: list, delete or copy (tsdb snapshot --help)")
	if err != nil {
		return nil, err
	}
	cfg.cmd = cmd
	if cmd == "copy" && cfg.toStoragePath == "" && cfg.toObjstore == "" {
		return nil, errors.New("copy: say where to: --to.storage.path or --to.objstore.config-file")
	}
	return cfg, nil
}

// snapshotMain runs tsdb snapshot with args (those after "snapshot") and
// returns the exit code.
func snapshotMain(args []string, stdout io.Writer) int {
	cfg, err := parseSnapshotFlags(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tsdb snapshot:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := runSnapshot(ctx, cfg, stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tsdb snapshot:", err)
		return 1
	}
	return 0
}

func runSnapshot(ctx context.Context, cfg *snapshotConfig, stdout io.Writer) error {
	logger := promslog.New(&cfg.log)
	src, err := openBucket(ctx, cfg.objstoreConfig, cfg.storagePath)
	if err != nil {
		return err
	}
	defer src.bucket.Close()
	missing := func(err error) error {
		if errors.Is(err, lsm.ErrNoCheckpoint) {
			return fmt.Errorf("%s has no snapshot named %q (tsdb snapshot list)", src.where, cfg.name)
		}
		return err
	}
	switch cfg.cmd {
	case "list":
		list, err := lsm.ListCheckpoints(ctx, src.bucket, src.prefix)
		if err != nil {
			return fmt.Errorf("%s: %w", src.where, err)
		}
		tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tTAKEN\tTABLES\tSIZE")
		for _, c := range list {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", c.Name, c.Created.UTC().Format(time.RFC3339), c.Tables, formatBytes(c.Bytes))
		}
		return tw.Flush()
	case "delete":
		if err := lsm.DeleteCheckpoint(ctx, src.bucket, src.prefix, cfg.name); err != nil {
			return missing(fmt.Errorf("%s: %w", src.where, err))
		}
		fmt.Fprintf(stdout, "deleted snapshot %s of %s\n", cfg.name, src.where)
		return nil
	case "copy":
		dst, err := openBucket(ctx, cfg.toObjstore, cfg.toStoragePath)
		if err != nil {
			return err
		}
		defer dst.bucket.Close()
		start := time.Now()
		st, err := lsm.CopyCheckpoint(ctx, src.bucket, src.prefix, cfg.name, dst.bucket, dst.prefix, logger)
		if err != nil {
			return missing(fmt.Errorf("%s to %s: %w", src.where, dst.where, err))
		}
		fmt.Fprintf(stdout, "copied snapshot %s of %s to %s: %d tables, %s in %s\n", cfg.name, src.where, dst.where,
			st.Tables, formatBytes(st.Bytes), time.Since(start).Round(time.Millisecond))
		return nil
	}
	return fmt.Errorf("unknown command %q", cfg.cmd)
}

// snapshotter lets the admin API take snapshots of the storage.
type snapshotter struct{ db *storage.DB }

// snapshotTimeout bounds a snapshot once asked for: it goes on if the
// client goes away (the head write-out it starts is shared work).
const snapshotTimeout = 10 * time.Minute

func (s snapshotter) Snapshot(ctx context.Context, name string, withHead bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), snapshotTimeout)
	defer cancel()
	_, err := s.db.Snapshot(ctx, name, withHead)
	return err
}

func snapshotterFor(db *storage.DB, mode string) promql.Snapshotter {
	if mode != "writer" {
		return nil
	}
	return snapshotter{db}
}
