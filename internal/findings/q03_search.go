package findings

import "context"

// runSearch answers question 3. Not built yet.
func runSearch(ctx context.Context, cfg Config) (Answer, error) {
	return Answer{}, ErrNotBuilt
}
