package portfolio

// Waiting is how many admissions wait for a flush.
func (b *Batch) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.waiting)
}
