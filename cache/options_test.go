package cache

import "testing"

func TestOptionsValidate(t *testing.T) {
	f := func(name string, edit func(*Options), ok bool) {
		t.Helper()
		o := DefaultOptions()
		edit(&o)
		if err := o.Validate(); (err == nil) != ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", name, err, ok)
		}
	}
	f("defaults", func(o *Options) {}, true)
	f("defaults with disk", func(o *Options) { o.DiskPath = "/tmp/x" }, true)
	f("no memory", func(o *Options) { o.MemoryBytes = 0 }, false)
	f("meta share 0", func(o *Options) { o.MetaShare = 0 }, false)
	f("meta share 1", func(o *Options) { o.MetaShare = 1 }, false)
	f("memory too small to split", func(o *Options) { o.MemoryBytes = 2; o.MetaShare = 0.1 }, false)
	f("disk smaller than two segments", func(o *Options) { o.DiskPath = "/tmp/x"; o.DiskBytes = 100 << 10 }, false)
	f("segment too small", func(o *Options) { o.DiskPath = "/tmp/x"; o.DiskSegmentBytes = 100 }, false)
	f("segment too large", func(o *Options) { o.DiskPath = "/tmp/x"; o.DiskSegmentBytes = 2 << 30 }, false)
	f("small disk, explicit segment", func(o *Options) { o.DiskPath = "/tmp/x"; o.DiskBytes = 64 << 10; o.DiskSegmentBytes = 16 << 10 }, true)
	f("no write queue", func(o *Options) { o.DiskPath = "/tmp/x"; o.DiskWriteQueue = 0 }, false)
	f("no write queue bytes", func(o *Options) { o.DiskPath = "/tmp/x"; o.DiskWriteQueueBytes = 0 }, false)
	f("disk settings ignored without a path", func(o *Options) { o.DiskBytes = 0 }, true)
}
