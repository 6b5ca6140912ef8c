package findings

import "context"

// runMerge answers question 10. Not built yet.
func runMerge(ctx context.Context, cfg Config) (Answer, error) {
	return Answer{}, ErrNotBuilt
}
