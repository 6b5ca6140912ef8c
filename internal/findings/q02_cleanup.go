package findings

import "context"

// runCleanup answers question 2. Not built yet.
func runCleanup(ctx context.Context, cfg Config) (Answer, error) {
	return Answer{}, ErrNotBuilt
}
