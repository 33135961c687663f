package storage

import (
	"fmt"

	"github.com/shaledb/shale/gorilla"
	"github.com/shaledb/shale/index"
)

// mergeValues is the LSM merge operator of the time-series engine. Sample
// blocks merge by time (the newer operand wins on equal timestamps);
// postings merge by union; anything else keeps the newest operand.
// operands are oldest first; existing is nil when there is no base value.
func mergeValues(key, existing []byte, operands [][]byte) ([]byte, error) {
	if len(key) >= 10 && key[0] == keyPart {
		switch key[9] {
		case subSamples:
			blocks := make([][]byte, 0, len(operands)+1)
			if len(existing) > 0 {
				blocks = append(blocks, existing)
			}
			for _, op := range operands {
				if len(op) > 0 {
					blocks = append(blocks, op)
				}
			}
			if len(blocks) == 1 {
				return append([]byte(nil), blocks[0]...), nil
			}
			out, err := gorilla.MergeAll(nil, blocks...)
			if err != nil {
				return nil, fmt.Errorf("merge sample blocks of key %x: %w", key, err)
			}
			return out, nil
		case subPostings, subAll:
			return index.MergePostings(nil, existing, operands)
		}
	}
	if len(operands) == 0 {
		return existing, nil
	}
	return operands[len(operands)-1], nil
}
