package findings

import "context"

// runAfterHandoff answers question 5. Not built yet.
func runAfterHandoff(ctx context.Context, cfg Config) (Answer, error) {
	return Answer{}, ErrNotBuilt
}
