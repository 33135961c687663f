package objstore

import "time"

// SetIdleTimeouts sets how long b waits for the next byte of an answer's
// body and for the store to take the next byte of an upload
// (answerIdleTimeout and uploadIdleTimeout by default).
func SetIdleTimeouts(b *S3Bucket, answer, upload time.Duration) {
	b.answerIdle, b.uploadIdle = answer, upload
}
