package findings

import "context"

// runStale answers question 8. Not built yet.
func runStale(ctx context.Context, cfg Config) (Answer, error) {
	return Answer{}, ErrNotBuilt
}
