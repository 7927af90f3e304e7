package token

// Watched reports whether s's next call would return its remembered read
// on the watches' word alone, without a stat.
func Watched(s *FileSource) bool {
	if s.w == nil {
		return false
	}
	g, ok := s.w.current()
	last := s.last.Load()
	return ok && last != nil && last.gen == g && s.now().Before(last.until)
}
