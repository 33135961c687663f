package sst

import "fmt"

// WriterOptions are the settings of a Writer.
type WriterOptions struct {
	// BlockSize is the target uncompressed size of a data block in bytes; a
	// block is cut once it reaches this size, so a block holding one large
	// entry may be bigger. Default 4096.
	BlockSize int
	// BloomBitsPerKey sizes the bloom filter per distinct key; 10 gives about
	// 1% false positives. 0 disables the filter. Default 10.
	BloomBitsPerKey int
	// Compression is applied to data and index blocks; a block that does not
	// shrink by at least 1/8 is stored uncompressed. Default CompressionS2
	// (see docs/format/sst.md for the measurements behind the choice).
	Compression Compression
	// RestartInterval is how many entries share prefix compression before a
	// key is stored whole (a restart point for binary search within a
	// block). Default 16.
	RestartInterval int
}

// DefaultWriterOptions returns the default settings.
func DefaultWriterOptions() WriterOptions {
	return WriterOptions{
		BlockSize:       4096,
		BloomBitsPerKey: 10,
		Compression:     CompressionS2,
		RestartInterval: 16,
	}
}

// maxBlockSize bounds BlockSize; blocks are read whole.
const maxBlockSize = 16 << 20

// Validate reports settings a Writer cannot use. Zero BlockSize and
// RestartInterval are allowed and mean the default.
func (o WriterOptions) Validate() error {
	switch {
	case o.BlockSize < 0 || o.BlockSize > maxBlockSize:
		return fmt.Errorf("sst: block size %d out of range [0, %d]", o.BlockSize, maxBlockSize)
	case o.BloomBitsPerKey < 0 || o.BloomBitsPerKey > 64:
		return fmt.Errorf("sst: bloom bits per key %d out of range [0, 64]", o.BloomBitsPerKey)
	case !o.Compression.valid():
		return fmt.Errorf("sst: unknown compression %d", o.Compression)
	case o.RestartInterval < 0 || o.RestartInterval > 1024:
		return fmt.Errorf("sst: restart interval %d out of range [0, 1024]", o.RestartInterval)
	}
	return nil
}

func (o WriterOptions) withDefaults() WriterOptions {
	d := DefaultWriterOptions()
	if o.BlockSize == 0 {
		o.BlockSize = d.BlockSize
	}
	if o.RestartInterval == 0 {
		o.RestartInterval = d.RestartInterval
	}
	return o
}
