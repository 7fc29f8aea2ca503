package jetstream

// EncodeOutcome encodes an outcome as Serve publishes it, with status
// "ok" or "error"; only for testing (forged duplicates).
func EncodeOutcome(key, status, worker string, delivery int, errText string) []byte {
	o := outcome{Key: key, Status: statusOK, Worker: worker, Delivery: delivery, Error: errText}
	if status != "ok" {
		o.Status = statusError
	}
	return o.encode()
}
