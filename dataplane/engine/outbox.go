package engine

// enqueueOut queues m for the reader; dropped once closed.
func (s *session) enqueueOut(m Status) {
	if s.isClosed() {
		return
	}
	s.mu.Lock()
	s.queue = append(s.queue, m)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *session) pump() {
	defer close(s.pumpDone)
	defer close(s.out)
	for {
		s.mu.Lock()
		if len(s.queue) == 0 {
			s.mu.Unlock()
			select {
			case <-s.notify:
				continue
			case <-s.done:
				return
			}
		}
		m := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.mu.Unlock()
		select {
		case s.out <- m:
		case <-s.done:
			return
		}
	}
}
