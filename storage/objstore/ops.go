package objstore

// Op names a Bucket method; decorators use it in metrics labels, fault rules
// and request counts.
type Op string

// The Bucket operations.
const (
	OpGet        Op = "get"
	OpGetRange   Op = "get_range"
	OpAttributes Op = "attributes"
	OpPut        Op = "put"
	OpDelete     Op = "delete"
	OpList       Op = "list"
)

// Ops lists every operation.
var Ops = []Op{OpGet, OpGetRange, OpAttributes, OpPut, OpDelete, OpList}

var (
	_ Bucket = (*MemoryBucket)(nil)
	_ Bucket = (*FilesystemBucket)(nil)
	_ Bucket = (*S3Bucket)(nil)
	_ Bucket = (*PrefixBucket)(nil)
	_ Bucket = (*MetricsBucket)(nil)
	_ Bucket = (*FaultBucket)(nil)
)
